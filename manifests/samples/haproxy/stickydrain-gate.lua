-- stickydrain's gate (docs/haproxy.md, "The gate"): a new HAProxy process —
-- restarted, crashed, a new replica, or a reload's new worker — accepts
-- connections before it holds its servers, and a request answered then
-- would get a 503 (no server yet) or reach an address the process read from
-- a stale server-state-file. The gate holds such a request until the process
-- holds its servers again: until the ready map has the key "filled" (set by
-- the controller once it has filled every backend) or "replayed" (set by
-- `stickydrain-haproxy reload` once a reload's new worker holds what the old
-- one had). It looks every 10 ms, so a held request goes on as soon as the
-- key is there. After the action's limit (milliseconds) it lets the request
-- through with whatever the process has, and says so once in the log.
--
--   global
--       setenv STICKYDRAIN_READY_MAP /usr/local/etc/haproxy/stickydrain-ready.map
--       lua-load /usr/local/etc/haproxy/stickydrain-gate.lua
--   frontend www
--       http-request lua.stickydrain_gate 5000 if !{ str(filled),map(/usr/local/etc/haproxy/stickydrain-ready.map) -m found } !{ str(replayed),map(/usr/local/etc/haproxy/stickydrain-ready.map) -m found }
--
-- The map's path comes from the environment (HAProxy 2.6 passes lua-load no
-- arguments) and must be the one the rest of haproxy.cfg names: the
-- controller and the helper set the keys in that map, which this script
-- shares. The condition on the action keeps the script off every request
-- once the process is open. Needs HAProxy built with Lua (Debian's, the
-- official images'); tested on 2.6, 3.0 and 3.2.

local path = os.getenv("STICKYDRAIN_READY_MAP")
if path == nil or path == "" then
	error("stickydrain-gate.lua: STICKYDRAIN_READY_MAP is not set: add `setenv STICKYDRAIN_READY_MAP <the ready map's path>` to the global section, before lua-load")
end
local ready = Map.new(path, Map._str)
local step = 10 -- milliseconds between two looks
local warned = false

local function open()
	return ready:lookup("filled") ~= nil or ready:lookup("replayed") ~= nil
end

core.register_action("stickydrain_gate", { "http-req" }, function(txn, limit)
	local max = tonumber(limit)
	if max == nil or max < 0 then
		max = 5000
	end
	local waited = 0
	while not open() do
		if waited >= max then
			if not warned then
				warned = true
				core.Warning(string.format("stickydrain gate: no \"filled\" or \"replayed\" in %s after %d ms; letting requests through unfilled (is the controller running, and does its readyMap name this file?)", path, max))
			end
			return
		end
		core.msleep(step)
		waited = waited + step
	end
end, 1)
