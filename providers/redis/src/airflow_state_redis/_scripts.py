"""
Lua scripts for the writes whose effect depends on a read.

Plain writes go through MULTI/EXEC; a script is used only where the server must read first and
decide, so that no other client can slip in between the read and the write.
"""

from __future__ import annotations

# KEYS[1] task hash, KEYS[2] its map-index set; ARGV[1] state key, ARGV[2] map index.
# Redis drops a hash when its last field goes, and the index set must then forget the map index,
# or clearing all map indexes would keep visiting hashes that no longer exist.
DELETE_TASK_KEY = """
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SREM', KEYS[2], ARGV[2])
end
return 0
"""

# KEYS[1] map-index set; ARGV[1] the task's key base followed by ':'.
# The hash names are only known after reading the set, so they cannot be declared in KEYS; they
# share the set's hash tag, so they live on the same Redis Cluster slot all the same.
CLEAR_ALL_MAP_INDEXES = """
local indexes = redis.call('SMEMBERS', KEYS[1])
for _, index in ipairs(indexes) do
    redis.call('DEL', ARGV[1] .. index)
end
redis.call('DEL', KEYS[1])
return #indexes
"""
