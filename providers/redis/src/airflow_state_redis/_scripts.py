"""
Lua scripts for the writes whose effect depends on a read.

Plain writes go through MULTI/EXEC; a script is used only where the server must read first and
decide, so that no other client can slip in between the read and the write.
"""

from __future__ import annotations

# KEYS[1] task hash, KEYS[2] its map-index set, KEYS[3] its metadata hash; ARGV[1] state key,
# ARGV[2] map index.
# Redis drops a hash when its last field goes, and the index set must then forget the map index,
# or clearing all map indexes would keep visiting hashes that no longer exist. The metadata hash
# goes with its value hash (whatever fields it may still hold, e.g. left by an older build that
# did not know about it), so no metadata outlives the state it describes.
DELETE_TASK_KEY = """
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SREM', KEYS[2], ARGV[2])
    redis.call('DEL', KEYS[3])
end
return 0
"""

# KEYS[1] map-index set; ARGV[1] the task's key base followed by ':', ARGV[2] the suffix of a
# hash's metadata hash.
# The hash names are only known after reading the set, so they cannot be declared in KEYS; they
# share the set's hash tag, so they live on the same Redis Cluster slot all the same.
CLEAR_ALL_MAP_INDEXES = """
local indexes = redis.call('SMEMBERS', KEYS[1])
for _, index in ipairs(indexes) do
    redis.call('DEL', ARGV[1] .. index, ARGV[1] .. index .. ARGV[2])
end
redis.call('DEL', KEYS[1])
return #indexes
"""
