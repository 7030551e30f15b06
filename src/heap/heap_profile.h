// heap/heap_profile.h: a heap's retainers as a memory profile (profile/profile.h, value type
// Heap): one sample per group of objects with one dominator chain from the roots (root first
// in pprof, leaf first here as every Sample), its values their count and their own bytes; so a
// frame's total is the retained size of what it names. Written by report/pprof.h as inuse_objects /
// inuse_space.
#pragma once

#include "heap/heap_graph.h"
#include "profile/profile.h"

namespace ljprof::heap {

// Frames are of kind Lua with the path step as the function name ("_G", ".cache",
// "upvalue 'x' of function <a.lua:3>", "(string)").
profile::Profile heap_profile(const Retainers& retainers);

// `current` minus `base` (an earlier heap profile read back), as go tool pprof -diff_base
// shows it: the base's samples are added with negated values, and equal stacks cancel.
void subtract_base(profile::Profile& current, const profile::Profile& base);

}  // namespace ljprof::heap
