// How much of the kernel verifier's budget the BPF programs use: loads each program of the
// given objects with the verifier's statistics log (log level 4) and prints the instructions it
// processed against the 1M limit (BPF_COMPLEXITY_LIMIT_INSNS). The one walker runs inside a
// bpf_loop callback that the verifier explores path by path, so small changes there can move
// this number a lot; run it after touching bpf/walker. Needs root.
//   verifier_budget OBJECT.bpf.o...
#include <bpf/libbpf.h>

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: verifier_budget OBJECT.bpf.o...\n");
    return 2;
  }
  libbpf_set_print(nullptr);
  int status = 0;
  for (int a = 1; a < argc; ++a) {
    bpf_object* obj = bpf_object__open_file(argv[a], nullptr);
    if (obj == nullptr) {
      std::fprintf(stderr, "%s: cannot open\n", argv[a]);
      status = 1;
      continue;
    }
    // One log buffer per program: the statistics line is the last one of each log.
    std::vector<std::vector<char>> logs;
    bpf_program* prog = nullptr;
    size_t n = 0;
    bpf_object__for_each_program(prog, obj)++ n;
    logs.resize(n, std::vector<char>(1 << 16));
    size_t i = 0;
    bpf_object__for_each_program(prog, obj) {
      bpf_program__set_log_level(prog, 4);
      bpf_program__set_log_buf(prog, logs[i].data(), logs[i].size());
      ++i;
    }
    const int err = bpf_object__load(obj);
    i = 0;
    const std::regex stats(R"(processed (\d+) insns)");
    bpf_object__for_each_program(prog, obj) {
      std::cmatch m;
      const char* log = logs[i++].data();
      if (std::regex_search(log, m, stats)) {
        const double used = std::stod(m[1]) / 1e6;
        std::printf("%-40s %-24s %9s insns processed  %5.1f%% of the 1M limit\n", argv[a],
                    bpf_program__name(prog), m[1].str().c_str(), 100 * used);
      } else {
        std::printf("%-40s %-24s no verifier statistics%s\n", argv[a], bpf_program__name(prog),
                    err ? " (load failed)" : "");
      }
    }
    if (err != 0) status = 1;
    bpf_object__close(obj);
  }
  return status;
}
