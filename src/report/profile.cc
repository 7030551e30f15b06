#include "report/profile.h"

namespace ljprof::report {

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::Native:
      return "native";
    case FrameKind::Lua:
      return "lua";
    case FrameKind::CFunc:
      return "cfunc";
    case FrameKind::Ffi:
      return "ffi";
    case FrameKind::Trace:
      return "trace";
    case FrameKind::Root:
      return "root";
    case FrameKind::Unknown:
      return "unknown";
  }
  return "unknown";
}

}  // namespace ljprof::report
