-- Known-split CPU workload for the `ljprof record` tests. It spends CPU in four places and
-- measures each with the VM's own clock (os.clock, process CPU time), so the profile's shares
-- are checked against the target's measurement, not against numbers written in a test:
--   burn_a   pure Lua arithmetic, about three times as long as
--   burn_b   the same loop in a second function;
--   in_c     table.sort with a Lua comparator: Lua -> C function (lib_table.c) -> Lua;
--   in_ffi   memset of a 4 MiB buffer through an FFI call.
-- M.round() runs each once; M.report() returns "name linedefined seconds" lines and the
-- per-interval throughput log, "rate <start ns> <end ns> <rounds> <on-cpu ns> <run-queue ns>":
-- CLOCK_MONOTONIC at both ends of an interval of at least 250 ms, and how long the kernel had
-- the process on a CPU and waiting for one meanwhile (/proc/self/schedstat), so a reader can
-- tell time lost to a busy neighbour from time the process was not runnable at all.
--
-- A round is sized by this process's own CPU clock, not by iteration counts: the first rounds
-- calibrate one factor that scales every part's work (their ratios stay those of the table
-- below) until a round takes about LJPROF_SPLIT_ROUND_S seconds of CPU (default 0.05); then the
-- factor stays fixed. Machines differ 2.5x in speed either way, an emulated CPU 20x: a recording
-- window of a few seconds holds as many rounds on each of them (the VM's clock covers whole
-- rounds while a window cuts the rounds at its two ends, so a window of a few long rounds puts
-- the shares points off: under arm64 emulation a full round took ~2 s, 5 s held 2.8 rounds and
-- burn_b's share came out 9 points high), and the throughput log's intervals hold whole rounds.
-- The calibration rounds are accounted like the others; the throughput log starts after them.
-- M.calibrated() says whether the factor is fixed (after at most 10 rounds); M.report() then
-- includes "scale <factor>", until then "scale calibrating".
local ffi = require('ffi')
ffi.cdef [[
void *memset(void *s, int c, size_t n);
typedef struct { long tv_sec; long tv_nsec; } ljprof_timespec;
int clock_gettime(int clk, ljprof_timespec *tp);
]]

local M = {}
local BUF_BYTES = 4 * 1024 * 1024
local buf = ffi.new('uint8_t[?]', BUF_BYTES)
local ts = ffi.new('ljprof_timespec')

local function monotonic_ns()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC, the clock the recorder stamps samples with
  return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end

local function burn_a(n)
  local x = 0
  for i = 1, n do x = (x * 31 + i) % 1000003 end
  return x
end

local function burn_b(n)
  local x = 0
  for i = 1, n do x = (x * 37 + i) % 1000033 end
  return x
end

local function cmp(p, q)
  return p < q
end

local function in_c(n)
  local t = {}
  local x = 7
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    t[i] = x
  end
  table.sort(t, cmp)
  return t[1]
end

local function in_ffi(n)
  for i = 1, n do ffi.C.memset(buf, i % 256, BUF_BYTES) end
  return buf[0]
end

-- Each part's work in a round of the full size, before the calibrated factor.
local parts = {
  { name = 'burn_a', fn = burn_a, full = 3000000 },
  { name = 'burn_b', fn = burn_b, full = 1000000 },
  { name = 'in_c', fn = in_c, full = 20000 },
  { name = 'in_ffi', fn = in_ffi, full = 120 },
}
for _, p in ipairs(parts) do p.seconds = 0 end

local round_s = tonumber(os.getenv('LJPROF_SPLIT_ROUND_S') or '0.05')
assert(round_s and round_s >= 0.005 and round_s <= 5, 'LJPROF_SPLIT_ROUND_S: seconds of CPU per '
       .. 'round, from 0.005 to 5, not ' .. tostring(os.getenv('LJPROF_SPLIT_ROUND_S')))
local scale
local function set_scale(s)
  scale = s
  for _, p in ipairs(parts) do p.arg = math.max(1, math.floor(p.full * s)) end
end
-- Small enough that the first round is short even under emulation; each calibration round then
-- moves the factor by at most 4x towards round_s (JIT compilation and first page faults make
-- the first rounds slower than the later ones).
set_scale(1 / 64)
local calibration_rounds = 0 -- so far; nil once the factor is fixed
local MAX_CALIBRATION_ROUNDS = 10

-- /proc/self/schedstat: "<on-cpu ns> <run-queue wait ns> <timeslices>"; zeros if unreadable.
local function schedstat()
  local f = io.open('/proc/self/schedstat')
  if not f then return 0, 0 end
  local run, wait = f:read('*n', '*n')
  f:close()
  return run or 0, wait or 0
end

local rounds, interval_start, interval_rounds = 0, monotonic_ns(), 0
local interval_run, interval_wait = schedstat()
local rates = {}

-- Each part is called by its own name, so profiles name its frame as debug.traceback() does
-- ("in upvalue 'burn_a'"), not by the table field it is stored in; straight from round(), so
-- the Lua stack is as deep as a call through the table would make it.
local function account(p, t0)
  p.seconds = p.seconds + (os.clock() - t0)
end

-- After a calibration round that took `cpu` seconds: the next factor, or the start of the
-- throughput log once the factor is fixed.
local function calibrate(cpu)
  calibration_rounds = calibration_rounds + 1
  local ratio = round_s / math.max(cpu, 1e-6)
  if (ratio >= 0.8 and ratio <= 1.25) or calibration_rounds >= MAX_CALIBRATION_ROUNDS then
    calibration_rounds = nil
    interval_start, interval_rounds = monotonic_ns(), 0
    interval_run, interval_wait = schedstat()
  else
    set_scale(scale * math.min(4, math.max(0.25, ratio)))
  end
end

function M.round()
  local start = os.clock()
  local t0 = start
  burn_a(parts[1].arg)
  account(parts[1], t0)
  t0 = os.clock()
  burn_b(parts[2].arg)
  account(parts[2], t0)
  t0 = os.clock()
  in_c(parts[3].arg)
  account(parts[3], t0)
  t0 = os.clock()
  in_ffi(parts[4].arg)
  account(parts[4], t0)
  rounds = rounds + 1
  if calibration_rounds then
    calibrate(os.clock() - start)
    return
  end
  interval_rounds = interval_rounds + 1
  local now = monotonic_ns()
  if now - interval_start >= 250e6 then
    local run, wait = schedstat()
    rates[#rates + 1] = string.format('rate %.0f %.0f %d %.0f %.0f', interval_start, now,
                                      interval_rounds, run - interval_run, wait - interval_wait)
    interval_start, interval_rounds, interval_run, interval_wait = now, 0, run, wait
  end
end

function M.report()
  local out = {}
  for _, p in ipairs(parts) do
    out[#out + 1] = string.format('%s %d %.6f', p.name, debug.getinfo(p.fn, 'S').linedefined,
                                  p.seconds)
  end
  out[#out + 1] = string.format('cmp %d 0', debug.getinfo(cmp, 'S').linedefined)
  out[#out + 1] = string.format('rounds %d', rounds)
  out[#out + 1] = calibration_rounds and 'scale calibrating' or string.format('scale %.6g', scale)
  for _, r in ipairs(rates) do out[#out + 1] = r end
  return table.concat(out, '\n') .. '\n'
end

function M.calibrated()
  return calibration_rounds == nil
end

-- Intervals in the throughput log so far.
function M.intervals()
  return #rates
end

M.monotonic_ns = monotonic_ns
return M
