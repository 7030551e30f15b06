# Cross-compiling ljprof for arm64 (make arm64): Debian's cross compilers
# (g++-aarch64-linux-gnu) against Debian's multiarch arm64 -dev packages (libbpf-dev:arm64, ...,
# installed by scripts/bootstrap), which live beside the host's in /usr/include/aarch64-linux-gnu
# and /usr/lib/aarch64-linux-gnu. Programs (protoc, bpftool, clang for the BPF target) are the
# host's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config must see the arm64 .pc files only, never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
