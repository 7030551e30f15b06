-- Writes cfi_fuzzer seeds that are worst cases for the table builder's cost, not for its
-- parser: one FDE covering the VM hint with many rows, followed by many copies of the x86-64
-- VM entry prologue pattern (push; sub rsp, 0x10 against a CFA of rsp+0x20), each of which the
-- VM scan turns into sub-ranges. A build that is quadratic in rows or sub-ranges takes tens of
-- seconds on these (the libFuzzer timeout catches it).
--   luajit fuzz/cfi_stress_seed.lua OUT_DIR
-- Layout of a cfi_fuzzer input (fuzz/cfi_fuzzer.cc): byte 0 picks x86-64, the rest is the
-- .eh_frame at vaddr 0x400000 + 192; .text is 0x400080..0x4000c0.
local out_dir = assert(arg[1], "usage: cfi_stress_seed.lua OUT_DIR")

local function u32(v)
  v = v % 2^32
  return string.char(v % 256, math.floor(v / 2^8) % 256, math.floor(v / 2^16) % 256,
                     math.floor(v / 2^24) % 256)
end
local function pad8(s)  -- entries are padded so that length field + body is a multiple of 8
  while (#s + 4) % 8 ~= 0 do s = s .. "\0" end
  return s
end

local eh_addr, text_addr = 0x400000 + 192, 0x400080
-- CIE: version 1, "zR", code align 1, data align -8, RA column 16, FDE pointers pcrel sdata4;
-- initial rules CFA = rsp + 0x20 (DW_CFA_def_cfa 7, 0x20), RA at CFA - 8 (DW_CFA_offset r16, 1).
local cie_body = pad8(u32(0) .. "\1zR\0\1\120\16\1\27" .. "\12\7\32\144\1")
local cie = u32(#cie_body) .. cie_body

local function seed(rows, prologues)
  -- One row per DW_CFA_advance_loc 1; DW_CFA_def_cfa_offset 0x20 keeps the rule.
  local insns = string.rep("\65\14\32", rows)
  local code = string.rep("\80\72\131\236\16", prologues)  -- push rax; sub rsp, 0x10
  local fde_at = eh_addr + #cie
  local function fde(range)
    local body = u32(#cie + 4) .. u32(text_addr - (fde_at + 8)) .. u32(range) .. "\0" .. insns
    body = pad8(body)
    return u32(#body) .. body
  end
  local size = #fde(0)
  local range = (fde_at + size + 4 + #code + 64) - text_addr
  return "\0" .. cie .. fde(range) .. u32(0) .. code
end

-- Sizes: under ASan+libFuzzer the quadratic scan (before 2d7ad8c) took 23 s and 12 s on these,
-- past the 10 s timeout; the near-linear one takes 0.3-0.4 s, leaving the fuzzer most of its
-- time for other inputs.
for name, shape in pairs({ ["stress-prologues"] = { 10, 7000 },
                           ["stress-rows-and-prologues"] = { 4000, 5000 } }) do
  local f = assert(io.open(out_dir .. "/" .. name, "wb"))
  f:write(seed(shape[1], shape[2]))
  f:close()
end
