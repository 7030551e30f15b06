// `ljprof cfi` end to end: --at shows the row covering an address (oracle: readelf's rows of
// the FDE covering it, nm for the symbol), --json is machine-readable, bad input exits 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "support/test_support.h"

namespace ljprof {
namespace {

test::CommandResult cfi(std::vector<std::string> args) {
  args.insert(args.begin(), {test::ljprof_bin(), "cfi"});
  return test::run(args);
}

TEST(CfiCommand, AtAddressShowsTheVmRuleAsJson) {
  auto nm = test::run({"nm", "/usr/bin/tarantool"});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(nm.out, m, std::regex("([0-9a-f]+) t lj_BC_ADDVV\n")));
  std::string at = "0x" + m[1].str();
  auto r = cfi({"/usr/bin/tarantool", "--at", at, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["hint"], "keep");
  // readelf: the zPR FDE's only row is "rsp+80 c-24 c-16 ... c-8" (rbx, rbp, ..., ra).
  auto re = test::run({"readelf", "-wN", "--debug-dump=frames-interp", "/usr/bin/tarantool"});
  std::smatch row;
  ASSERT_TRUE(std::regex_search(re.out, row,
                                std::regex("LOC +CFA +rbx +rbp .*\n0*5eb450 rsp\\+80 +c(-\\d+) ")));
  EXPECT_EQ(j["rows"][0]["rule"],
            "cfa=rsp+80 ra=[cfa-8] fp=[cfa-16] rbx=[cfa" + row[1].str() + "]");
  EXPECT_EQ(j["vm_cframe"]["cfa"], "rsp+80");
  EXPECT_TRUE(j["fde_errors"].empty());
}

// `cfi` and `inspect` describe one VM interval: lj_vm_asm_begin .. the end of lj_vm_ffi_call
// (nm), which runs past the interpreter's own FDE (the FFI call trampoline has an FDE of its own).
TEST(CfiCommand, VmIntervalIsTheOneInspectAndTheWalkerUse) {
  auto nm = test::run({"nm", "-S", "/usr/bin/tarantool"});
  std::smatch begin, ffi;
  ASSERT_TRUE(std::regex_search(nm.out, begin, std::regex("([0-9a-f]+) [tT] lj_vm_asm_begin\n")));
  ASSERT_TRUE(
      std::regex_search(nm.out, ffi, std::regex("([0-9a-f]+) ([0-9a-f]+) [tT] lj_vm_ffi_call\n")));
  const uint64_t vm_end = std::stoull(ffi[1], nullptr, 16) + std::stoull(ffi[2], nullptr, 16);
  auto c = cfi({"/usr/bin/tarantool", "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto cj = nlohmann::json::parse(c.out);
  auto i = test::run({test::ljprof_bin(), "inspect", "--json", "/usr/bin/tarantool"});
  ASSERT_EQ(i.exit_code, 0) << i.err;
  auto ij = nlohmann::json::parse(i.out);
  EXPECT_EQ(std::stoull(cj["vm"]["begin"].get<std::string>(), nullptr, 16),
            std::stoull(begin[1], nullptr, 16));
  EXPECT_EQ(std::stoull(cj["vm"]["end"].get<std::string>(), nullptr, 16), vm_end);
  EXPECT_EQ(cj["vm_cframe"]["vm_end"], ij["vm_cframe"]["vm_end"]);
  EXPECT_EQ(cj["vm_cframe"]["vm_begin"], ij["vm_cframe"]["vm_begin"]);
}

// In text, --at shows only what concerns the address: of the VM's sub-ranges (the JSON of the
// whole table lists them) the one holding it, and no JSON.
TEST(CfiCommand, AtAddressInTextShowsOnlyTheSubRangeHoldingIt) {
  auto whole = cfi({"/usr/bin/tarantool", "--json"});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const auto subranges = nlohmann::json::parse(whole.out)["vm_subranges"];
  ASSERT_GT(subranges.size(), 1u);
  const std::string begin = subranges[0]["begin"].get<std::string>();
  auto r = cfi({"/usr/bin/tarantool", "--at", begin});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t shown = 0;
  for (size_t pos = r.out.find("sub-range "); pos != std::string::npos;
       pos = r.out.find("sub-range ", pos + 1)) {
    ++shown;
  }
  EXPECT_EQ(shown, 1u) << r.out;
  EXPECT_NE(r.out.find("sub-range " + begin + ".." + subranges[0]["end"].get<std::string>()),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find('{'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vm C frame: cfa=rsp+80"), std::string::npos) << r.out;
}

TEST(CfiCommand, TextTableListsEveryRow) {
  auto r = cfi({"/lib64/ld-linux-x86-64.so.2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(".eh_frame"), std::string::npos);
  EXPECT_NE(r.out.find(" ok "), std::string::npos);
  EXPECT_NE(r.out.find(" invalid "), std::string::npos);
}

TEST(CfiCommand, BadInputExitsTwo) {
  EXPECT_EQ(cfi({"/nonexistent"}).exit_code, 2);
  auto r = cfi({"/usr/bin/tarantool", "--at", "zz"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not an address"), std::string::npos);
}

}  // namespace
}  // namespace ljprof
