// profile/profile_frames.h: the one function that turns a walk's symbolize::Frame list into the
// frames profiles show and aggregate (DESIGN.md "Frame model").
#pragma once

#include <string>
#include <vector>

#include "profile/profile.h"
#include "symbolize/frame.h"

namespace ljprof::profile {

// A walk's frames (leaf first) as profiles show them: Lua functions by the name their caller
// used (else as the traceback words an unnamed function), the file a chunk was loaded from in
// `file` and only its last component in labels; a JIT trace's machine code as the Lua
// function the trace starts in (kind Trace), folded into that function's frame when it is the
// next one out; an unreadable frame as "[unknown: reason]".
std::vector<Frame> profile_frames(const std::vector<symbolize::Frame>& walk);

// A Lua chunk's file as labels show it: a path's last component ("app.lua"); a string chunk's
// short form ("[string \"...\"]", "=stdin") as it is.
std::string display_file(const std::string& file);

// An off-CPU sample whose thread waits for work in its event loop: no Lua frame, and the wait is
// epoll_wait / epoll_pwait / io_uring_enter (Tarantool's tx thread and nginx workers between
// requests). Its state label is "idle", and the off-CPU view (report/views.h) leaves it out: an
// idle loop is not a problem.
bool is_idle_wait(const Sample& sample);

}  // namespace ljprof::profile
