-- JIT-compiled code with a split known by construction, for `ljprof record`'s JIT-line tests.
-- Every step is the same expression, x = (x * 31 + k) % 1000003, one serial chain (each step
-- needs the previous x), so CPU time follows the number of steps:
--   inlined  light(heavy(x)) in a loop: heavy does 9 steps, light 3. LuaJIT inlines both into
--            the loop's trace; each begins with a table store and a table load, so the trace
--            takes a snapshot inside each function (lj_snap.c: a guard after a side effect),
--            which is what names their machine code. Expected: heavy 75%, light 25%.
--   lines    one loop whose body has a costly line (9 steps) and a cheap line (1 step), each
--            beginning the same way. Expected: the costly line first, about 90%.
-- Usage: jit_inlined.lua MODE SECONDS; prints "NAME LINEDEFINED" for heavy and light and
-- "line NAME N" for the two lines of `lines`.
local mode, seconds = arg[1], tonumber(arg[2]) or 3
local ch, cl, kh, kl = {0}, {0}, {7}, {7}
local function heavy(x)
  ch[1] = ch[1] + 1 local k = kh[1]
  x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003
  x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003
  x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003
  return x
end
local function light(x)
  cl[1] = cl[1] + 1 local k = kl[1]
  x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003
  return x
end
local function lines(x)
  for _ = 1, 1e6 do
    ch[1] = ch[1] + 1 local k = kh[1] x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003 x = (x * 31 + k) % 1000003
    cl[1] = cl[1] + 1 k = kl[1] x = (x * 31 + k) % 1000003
  end
  return x
end
for _, f in ipairs({heavy, light}) do
  local info = debug.getinfo(f, "S")
  print(f == heavy and "heavy" or "light", info.linedefined)
end
print("line costly " .. debug.getinfo(lines, "S").linedefined + 2)
print("line cheap " .. debug.getinfo(lines, "S").linedefined + 3)
io.stdout:flush()
local x, t0 = 1, os.clock()
while os.clock() - t0 < seconds do
  if mode == "lines" then
    x = lines(x)
  else
    for _ = 1, 1e6 do x = light(heavy(x)) end
  end
end
print("result " .. x)
