"""
Lua scripts: every operation whose effect depends on a read (a script runs atomically).

Numbers: Lua numbers are doubles, exact up to 2**53. Versions and epoch micro/milliseconds stay
far below that; counters do not, so :data:`INCREMENT` never does arithmetic in Lua: Redis's own
``HINCRBY`` adds in 64 bits and refuses overflow.
"""

from __future__ import annotations

# Helpers prepended to every script that reads metadata (its format: ._meta).
_META = """
local function meta_of(meta)
    if not meta then return '1', nil end
    local version, expires, after = string.match(meta, '^%d+:%-?%d*:(%d+):(%d*)()')
    if not version or (after <= #meta and string.sub(meta, after, after) ~= ':') then
        return '1', nil
    end
    if expires == '' then return version, nil end
    return version, tonumber(expires)
end

local function expired(expires, now)
    return expires ~= nil and expires <= now
end
"""

# What a write does after deciding to write: the value, its metadata with the next version, and the
# expiry of the hashes. KEYS[1] values, KEYS[2] metadata, KEYS[3] map-index set (task state only;
# the caller also passes the call's marker last, which _once takes off KEYS before this runs).
# Every write script takes the same ARGV[1..6]: ARGV[1] now (epoch micros), ARGV[2] metadata
# before the version ("<micros>:<try>:"), ARGV[3] metadata after it (":<expires micros or
# empty>[:<writer>]"), ARGV[4] hash TTL in ms ('' = none: PERSIST), ARGV[5] ms until the written
# keys expire ('' = never, or already past), ARGV[6] map index.
# The new hash TTL is the longest of what is left, the TTL, and the written key's expiry; a hash
# with none although one is configured gets one long enough for every key it holds.
_STORE = """
local function longest_expiry_ms(meta_key, now)
    local longest = 0
    for _, meta in ipairs(redis.call('HVALS', meta_key)) do
        local _, expires = meta_of(meta)
        if expires ~= nil and expires - now > longest then longest = expires - now end
    end
    return math.ceil(longest / 1000)
end

-- The stored version of a field ('0' when absent), and whether it is stored and not expired.
local function current(field, now)
    if redis.call('HEXISTS', KEYS[1], field) == 0 then return '0', false end
    local version, expires = meta_of(redis.call('HGET', KEYS[2], field))
    return version, not expired(expires, now)
end

local function next_of(version)
    return string.format('%d', tonumber(version) + 1)
end

-- Writes fields[j] = datas[j] with version versions[j].
local function store_all(fields, datas, versions)
    local now, ttl_ms, expires_in_ms = tonumber(ARGV[1]), ARGV[4], ARGV[5]
    local left = {}
    for i, name in ipairs(KEYS) do left[i] = redis.call('PTTL', name) end
    for j = 1, #fields do
        redis.call('HSET', KEYS[1], fields[j], datas[j])
        redis.call('HSET', KEYS[2], fields[j], ARGV[2] .. versions[j] .. ARGV[3])
    end
    if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[6]) end
    for i, name in ipairs(KEYS) do
        if ttl_ms == '' then
            redis.call('PERSIST', name)
        else
            local want = tonumber(ttl_ms)
            if expires_in_ms ~= '' then want = math.max(want, tonumber(expires_in_ms)) end
            if left[i] == -1 then want = math.max(want, longest_expiry_ms(KEYS[2], now)) end
            if left[i] < want then redis.call('PEXPIRE', name, string.format('%d', want)) end
        end
    end
end

local function store(field, data, version)
    store_all({field}, {data}, {version})
    return version
end
"""

# A write runs once per call: the last of KEYS names the call, the script keeps its reply there for
# OP_TTL_MS, and a retry that finds it answers that reply. Written by the same script as the state,
# so a failover keeps both or loses both (docs/redis.md, "Failover").
OP_TTL_MS = 60_000


def _once(body: str) -> str:
    """A write script: *body* (which ends with a ``return``) run at most once per call, see above."""
    return (
        _META
        + _STORE
        + "local OP_KEY = table.remove(KEYS)\n"
        + "local done = redis.call('GET', OP_KEY)\n"
        + "if done then return cmsgpack.unpack(done) end\n"
        + "local function run()\n"
        + body
        + "\nend\n"
        + "local reply = run()\n"
        + f"redis.call('SET', OP_KEY, cmsgpack.pack(reply), 'PX', {OP_TTL_MS})\n"
        + "return reply\n"
    )


# WRITE: ARGV[7] field, ARGV[8] value, ARGV[9] the expected version ('' = unconditional; '0' =
# absent or expired). Returns {1, new version} or, on a version mismatch, {0, stored version}.
WRITE = _once(
    """
local version, alive = current(ARGV[7], tonumber(ARGV[1]))
if ARGV[9] ~= '' then
    local stored = alive and version or '0'
    if stored ~= ARGV[9] then return {0, stored} end
end
-- An expired key still stored continues its versions; a deleted one starts again at 1.
return {1, store(ARGV[7], ARGV[8], next_of(version))}
"""
)

# INCREMENT: ARGV[7] field, ARGV[8] the increment; the stored value is read as
# airflow_shared.state.counter_value reads it (absent or expired: 0). Returns {0, new value as
# text}, or {1, stored value} when it is refused (nothing written; the caller words the error).
INCREMENT = _once(
    """
local field, by = ARGV[7], ARGV[8]
local version, alive = current(field, tonumber(ARGV[1]))
local next_version = next_of(version)
if not alive then
    store(field, by, next_version)
    return {0, by}
end
local stored = redis.call('HGET', KEYS[1], field)
local sign, digits = string.match(stored, '^%s*(%-?)(%d+)%s*$')
if not digits then return {1, stored} end
digits = string.gsub(digits, '^0+', '')
if digits == '' then digits, sign = '0', '' end
if #digits > 19 then return {1, stored} end
if #digits == 19 and digits > (sign == '-' and '9223372036854775808' or '9223372036854775807') then
    return {1, stored}
end
-- HINCRBY reads only canonical integers: store the canonical form first, and put the original
-- back if the sum overflows (a script is atomic, so nobody sees the interim).
local canonical = sign .. digits
if canonical ~= stored then redis.call('HSET', KEYS[1], field, canonical) end
local added = redis.pcall('HINCRBY', KEYS[1], field, by)
if type(added) == 'table' and added.err then
    if canonical ~= stored then redis.call('HSET', KEYS[1], field, stored) end
    return {1, stored}
end
-- HINCRBY's reply is a Lua double: read the exact 64-bit text back instead.
local result = redis.call('HGET', KEYS[1], field)
store(field, result, next_version)
return {0, result}
"""
)

# SET_MANY: WRITE for many fields of one hash at once (unconditional), in one script so the batch
# is applied whole. ARGV[7...] field, value, field, value, ... Returns the new versions, in order.
SET_MANY = _once(
    """
local fields, datas, versions = {}, {}, {}
for i = 7, #ARGV, 2 do
    -- As WRITE: an expired key still stored continues its versions; a deleted one starts at 1.
    fields[#fields + 1] = ARGV[i]
    datas[#datas + 1] = ARGV[i + 1]
    versions[#versions + 1] = next_of((current(ARGV[i], tonumber(ARGV[1]))))
end
if #fields > 0 then store_all(fields, datas, versions) end
return versions
"""
)

# Expired fields of a hash, as a set. KEYS[1] values, KEYS[2] metadata, ARGV[1] now.
_EXPIRED = """
local function expired_fields(now)
    local found = {}
    local metas = redis.call('HGETALL', KEYS[2])
    for i = 1, #metas, 2 do
        local _, expires = meta_of(metas[i + 1])
        if expired(expires, now) then found[metas[i]] = true end
    end
    return found
end
"""

# LIVE_FIELDS: the fields of KEYS[1] that have not expired (unsorted). ARGV[1] now.
LIVE_FIELDS = (
    _META
    + _EXPIRED
    + """
local fields = redis.call('HKEYS', KEYS[1])
if #fields == 0 then return fields end
local gone = expired_fields(tonumber(ARGV[1]))
local live = {}
for _, field in ipairs(fields) do
    if not gone[field] then live[#live + 1] = field end
end
return live
"""
)

# COUNT_LIVE: how many fields of KEYS[1] have not expired. ARGV[1] now.
COUNT_LIVE = (
    _META
    + _EXPIRED
    + """
local count = redis.call('HLEN', KEYS[1])
if count == 0 then return 0 end
for field in pairs(expired_fields(tonumber(ARGV[1]))) do
    count = count - redis.call('HEXISTS', KEYS[1], field)
end
return count
"""
)

# Deletes fields of KEYS[1] (values) and KEYS[2] (metadata). An emptied hash takes its metadata hash
# (whatever it still holds) and its map index in the set KEYS[3] (task state) with it, so clearing
# all map indexes never visits hashes that no longer exist.
_DELETE = """
local function delete_fields(fields, map_index)
    for _, field in ipairs(fields) do
        redis.call('HDEL', KEYS[1], field)
        redis.call('HDEL', KEYS[2], field)
    end
    if redis.call('EXISTS', KEYS[1]) == 0 then
        redis.call('DEL', KEYS[2])
        if KEYS[3] then redis.call('SREM', KEYS[3], map_index) end
    end
end
"""

# CLEAN: remove the given fields if they still qualify (a key written again since it was picked
# survives). KEYS as _DELETE; ARGV[1] now, ARGV[2] updated before (epoch micros, '' = not by age),
# ARGV[3] '1' = dry run, ARGV[4] map index, ARGV[5...] the fields. Returns how many were removed.
CLEAN = (
    _META
    + _DELETE
    + """
local now, before = tonumber(ARGV[1]), tonumber(ARGV[2])
local due_fields = {}
for i = 5, #ARGV do
    local field = ARGV[i]
    local meta = redis.call('HGET', KEYS[2], field)
    local _, expires = meta_of(meta)
    local due = expired(expires, now)
    if not due and before and meta then
        local written = tonumber(string.match(meta, '^(%d+):'))
        due = written ~= nil and written < before
    end
    if due and redis.call('HEXISTS', KEYS[1], field) == 1 then due_fields[#due_fields + 1] = field end
end
if ARGV[3] ~= '1' then delete_fields(due_fields, ARGV[4]) end
return #due_fields
"""
)

# KEYS[1] map-index set; ARGV[1] the task's key base and ':', ARGV[2] the metadata hash's suffix.
# The hashes, known only from the set, are not in KEYS but share its hash tag (one Cluster slot).
CLEAR_ALL_MAP_INDEXES = """
local indexes = redis.call('SMEMBERS', KEYS[1])
for _, index in ipairs(indexes) do
    redis.call('DEL', ARGV[1] .. index, ARGV[1] .. index .. ARGV[2])
end
redis.call('DEL', KEYS[1])
return #indexes
"""


# DELETE_MANY: KEYS as _DELETE; ARGV[1] map index, ARGV[2...] the fields (at most 1000).
DELETE_MANY = (
    _DELETE
    + """
delete_fields({unpack(ARGV, 2)}, ARGV[1])
return 0
"""
)

# DISCARD_THROUGH_TRY: delete the fields last written by a try numbered ARGV[2] or lower (the try in
# their metadata; a field written outside a try, or without readable metadata, stays), in one step:
# a newer try's write can never land between finding a field and deleting it. KEYS as _DELETE plus
# the call's marker (a call sent again answers the same count); ARGV[1] map index. Returns how many.
DISCARD_THROUGH_TRY = _once(
    _DELETE
    + """
local through, doomed = tonumber(ARGV[2]), {}
local metas = redis.call('HGETALL', KEYS[2])
for i = 1, #metas, 2 do
    local try = string.match(metas[i + 1], '^%d+:(%-?%d+):') or string.match(metas[i + 1], '^%d+:(%-?%d+)$')
    if try and tonumber(try) <= through and redis.call('HEXISTS', KEYS[1], metas[i]) == 1 then
        doomed[#doomed + 1] = metas[i]
    end
end
delete_fields(doomed, ARGV[1])
return #doomed
"""
)

# CLEAR_ONE: KEYS[1] values, KEYS[2] metadata, KEYS[3] map-index set (task state only); ARGV[1]
# map index. A script rather than MULTI so that every write goes through one path (and WAIT).
CLEAR_ONE = """
redis.call('DEL', KEYS[1], KEYS[2])
if KEYS[3] then redis.call('SREM', KEYS[3], ARGV[1]) end
return 0
"""

#: Every script by the name the backend calls it by.
SCRIPTS = {
    "write": WRITE,
    "increment": INCREMENT,
    "live_fields": LIVE_FIELDS,
    "count_live": COUNT_LIVE,
    "clean": CLEAN,
    "clear_all": CLEAR_ALL_MAP_INDEXES,
    "set_many": SET_MANY,
    "delete_many": DELETE_MANY,
    "clear_one": CLEAR_ONE,
    "discard_through_try": DISCARD_THROUGH_TRY,
}

#: The scripts that write nothing (no WAIT after them, see :mod:`._durable`).
READ_ONLY = frozenset({"live_fields", "count_live"})
