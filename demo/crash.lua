-- The demo workload: an "application" that parses records with a string.gsub callback and
-- crashes in C (abort through the FFI) from inside that callback. `make demo` dumps its core
-- and shows the mixed native + Lua stack ljprof recovers from it.
local ffi = require("ffi")
ffi.cdef [[void abort(void);]]

local function on_field(field)
  if field == "boom" then
    ffi.C.abort()
  end
  return field:upper()
end

local function parse(record)
  return (string.gsub(record, "%a+", on_field))
end

local function handle(records)
  local out = {}
  for i, r in ipairs(records) do
    out[i] = parse(r)
  end
  return out
end

handle({"alpha beta", "gamma boom delta"})
