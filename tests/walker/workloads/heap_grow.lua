-- Grows one global table steadily (20 entries every 10 ms) while `ljprof heap -p` reads it:
-- two snapshots, the second diffed against the first, must show _G.growing as what grew.
local fiber = require("fiber")
growing = {}
local n = 0
while true do
  for _ = 1, 20 do n = n + 1; growing[n] = {n, tostring(n)} end
  fiber.sleep(0.01)
  if n == 400 then io.stdout:write("ljprof-ready\n") end
  if n % 400 == 0 then io.stdout:write(string.format("ljprof-grow %d\n", n)) io.stdout:flush() end
end
