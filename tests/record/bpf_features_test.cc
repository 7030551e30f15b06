// The probe that explains a refused kernel program (record/bpf_session.h missing_bpf_features)
// must not blame a kernel that has everything: on this kernel the program loads (every live
// test shows it), so nothing may be reported missing. uname's release is the outside witness
// that the kernel is new enough for the probe's own table (every entry is 5.17 or older).
#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "record/bpf_session.h"

namespace ljprof::record {
namespace {

TEST(BpfFeatures, NothingIsMissingOnAKernelThatLoadsTheProgram) {
  ASSERT_EQ(geteuid(), 0u) << "probing BPF helpers needs root";
  utsname u{};
  ASSERT_EQ(uname(&u), 0);
  int major = 0, minor = 0;
  ASSERT_EQ(std::sscanf(u.release, "%d.%d", &major, &minor), 2) << u.release;
  ASSERT_TRUE(major > 5 || (major == 5 && minor >= 17)) << u.release;
  EXPECT_EQ(missing_bpf_features(), std::vector<std::string>{});
}

}  // namespace
}  // namespace ljprof::record
