#!/bin/sh
# Runs inside the arm64 VM (scripts/arm64-vm, Debian's arm64 kernel under qemu-system-aarch64):
# the cross-built `ljprof record` against Debian's arm64 luajit (JIT on and off) and an arm64
# nginx-lua worker (OpenResty's luajit2) under a bounded local HTTP load, each running the known
# split of ../workloads/split.lua. Everything the host-side test checks goes to /out: per case the
# folded stacks, the workload's own per-part CPU clock (*.report), ljprof's exit status and
# summary; and the number of BPF programs the kernel holds before and after (no leaked
# programs or links once ljprof exits). Then a Tarantool in miniature's fibers, and a kernel
# core of a threaded C program.
#
#   guest_record.sh LJPROF WORKLOADS_DIR SECONDS [NAME=LUAJIT_EXECUTABLE]...
#
# Each NAME=LUAJIT_EXECUTABLE (Debian's /usr/bin/luajit, Tarantool's LuaJIT fork built for
# arm64, ...) runs the split with the JIT on and off: cases NAME_jit_on and NAME_jit_off.
# (Recording a process ljprof starts itself, `record -- COMMAND`, is covered on x86-64; in this
# VM the first process of an executable ends some walks in libraries the recorder is still
# analysing, most of a second on the emulated CPU: see docs/arm64.md.)
set -u
ljprof=$1
workloads=$2
seconds=$3
shift 3
out=/out

# JIT-compiled BPF programs are listed in /proc/kallsyms as "[bpf]" symbols once this is on.
echo 1 >/proc/sys/net/core/bpf_jit_kallsyms
# Where the VM's minutes go, in the host test's output: the guest's uptime at each step, and the
# most samples per second the kernel still allows (it lowers kernel.perf_event_max_sample_rate
# when sample handlers run long, as they do under emulation: the slower the host, the lower).
mark() {
  echo "guest_record: $1 at $(cut -d' ' -f1 /proc/uptime) s" \
    "(perf_event_max_sample_rate $(cat /proc/sys/kernel/perf_event_max_sample_rate))"
}
mark start
bpf_programs() { grep -c '\[bpf\]$' /proc/kallsyms; }
echo "before $(bpf_programs)" >"$out/bpf_programs"
# The most programs seen while the recordings run (proves the count sees ljprof's).
(
  most=0
  while [ ! -e /tmp/recordings-done ]; do
    n=$(bpf_programs)
    if [ "$n" -gt "$most" ]; then most=$n; fi
    echo "$most" >"$out/bpf_programs_during"
    sleep 0.5
  done
) &
counter=$!

# A full round of the split takes ~2 s of this emulated CPU, and the emulation's speed follows
# the host's; split.lua sizes its rounds by its own CPU clock instead: 0.1 s each, so a 5 s
# recording window holds ~50 rounds on any host and the parts the window cuts at its two ends
# weigh little against the VM's clock, which covers whole rounds.
export LJPROF_SPLIT_ROUND_S=0.1
# Waits (at most 120 s) until FILE holds a line matching the extended regex PATTERN.
wait_for_line() {
  i=0
  while ! grep -Eq "$2" "$1" 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
}

# Each runtime runs the split until told to stop, with the JIT on and off at once (one process
# per vCPU); one ljprof attaches to both (-p A,B) once each has calibrated its rounds and logged
# its first throughput interval (started, traces recorded: its own progress, not a fixed sleep)
# and records `seconds`, as an operator attaches to running servers, and
# `ljprof report --pid` takes each process's stacks out of the profile (its samples carry their
# pid). A workload's report covers its whole run: the split is the same in every round, so its
# per-part shares are those of the recorded window.
for runtime in "$@"; do
  name=${runtime%%=*}
  exe=${runtime#*=}
  pids=""
  for mode in jit_on jit_off; do
    case_name=${name}_$mode
    "$exe" "$workloads/run_split.lua" 120 "$out/$case_name.report" "$mode" "/tmp/$case_name.stop" \
      >"$out/$case_name.workload.log" 2>&1 &
    eval "pid_$mode=$!"
    pids="$pids${pids:+,}$!"
  done
  for mode in jit_on jit_off; do
    wait_for_line "$out/${name}_$mode.workload.log" '^interval [0-9]'
  done
  mark "$name attach"
  "$ljprof" record -p "$pids" -F 999 -d "$seconds" -o "$out/$name.pb.gz" >"$out/$name.log" 2>&1
  rc=$?
  mark "$name recorded"
  for mode in jit_on jit_off; do
    case_name=${name}_$mode
    eval "pid=\$pid_$mode"
    cp "$out/$name.log" "$out/$case_name.log"
    if [ "$rc" = 0 ]; then
      "$ljprof" report "$out/$name.pb.gz" --pid "$pid" --folded "$out/$case_name.folded" \
        >>"$out/$case_name.log" 2>&1
      echo $? >"$out/$case_name.rc"
    else
      echo "$rc" >"$out/$case_name.rc"
    fi
    touch "/tmp/$case_name.stop"
    wait "$pid"
  done
done

# nginx-lua: a master and one worker (as www-data, Debian's default user) serving split.lua's
# rounds; ljprof attaches to the running worker (-p) while a wget loop keeps it busy. The lua
# module and OpenResty's LuaJIT (same soname as Debian's) live in their own tree.
tree=/opt/nginx-lua
nginx_case() {
  mode=$1
  case_name=nginx_lua_$mode
  dir=/tmp/$case_name
  mkdir -p "$dir"
  {
    echo "load_module $tree/usr/lib/nginx/modules/ndk_http_module.so;"
    echo "load_module $tree/usr/lib/nginx/modules/ngx_http_lua_module.so;"
    echo "daemon on; master_process on; worker_processes 1; env LJPROF_SPLIT_ROUND_S;"
    echo "error_log $dir/error.log; pid $dir/nginx.pid;"
    echo "events { worker_connections 16; }"
    echo "http { access_log off;"
    echo "  lua_package_path \"$workloads/?.lua;$tree/usr/share/lua/5.1/?.lua;;\";"
    for temp in client_body proxy fastcgi uwsgi scgi; do echo "  ${temp}_temp_path $dir/$temp;"; done
    if [ "$mode" = jit_off ]; then echo "  init_by_lua_block { jit.off() }"; fi
    echo "  server { listen 127.0.0.1:8080;"
    echo "    location / { content_by_lua_file $workloads/nginx_split.lua; } } }"
  } >"$dir/nginx.conf"
  if ! LD_LIBRARY_PATH=$tree/usr/lib/aarch64-linux-gnu /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" >"$out/$case_name.log" 2>&1; then
    echo 1 >"$out/$case_name.rc"
    cat "$dir/error.log" >>"$out/$case_name.log" 2>/dev/null
    return
  fi
  # (busybox wget -T crashes in Debian 12's busybox-static; timeout bounds it instead)
  get() { timeout 60 wget -q -O - "http://127.0.0.1:8080$1"; }
  worker=$(get /pid)
  # Warm-up: the first request loads split.lua, the first rounds record the traces and size the
  # rounds (split.lua calibrates for at most 10).
  get /round >/dev/null && get /round >/dev/null && get /round >/dev/null
  i=0
  while get /report | grep -q 'scale calibrating' && [ $i -lt 20 ]; do
    get /round >/dev/null
    i=$((i + 1))
  done
  get /report >"$out/$case_name.before"
  (
    n=0
    while [ ! -e "$dir/stop" ] && [ $n -lt 2000 ]; do
      n=$((n + 1))
      get /round >/dev/null || echo "request $n failed" >>"$out/$case_name.failed"
    done
  ) &
  load=$!
  mark "$case_name attach"
  "$ljprof" record -p "$worker" -F 999 -d "$seconds" -o "$out/$case_name.pb.gz" \
    --folded "$out/$case_name.folded" >>"$out/$case_name.log" 2>&1
  echo $? >"$out/$case_name.rc"
  mark "$case_name recorded"
  touch "$dir/stop"
  wait "$load"
  get /report >"$out/$case_name.after"
  kill "$(cat "$dir/nginx.pid")"
  i=0
  while [ -e "$dir/nginx.pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  cat "$dir/error.log" >>"$out/$case_name.log" 2>/dev/null
}
nginx_case jit_on
nginx_case jit_off

# Off-CPU time (record --off-cpu) on the arm64 kernel, whose kprobes close the intervals at
# finish_task_switch: Debian's luajit blocking in usleep (../workloads/off_cpu.lua prints its own
# per-function sleeping time); the folded stacks are the off-CPU view, in microseconds.
mark "off_cpu start"
"$ljprof" record --off-cpu=5ms -q -o "$out/off_cpu.pb.gz" --folded "$out/off_cpu.folded" -- \
  /usr/bin/luajit "$workloads/off_cpu.lua" 3 >"$out/off_cpu.out" 2>"$out/off_cpu.log"
echo $? >"$out/off_cpu.rc"

# A C signal handler stacked on Lua code (../workloads/signal_interrupted.lua with
# signal_handler.c cross-built by the host test): the walk goes through the vDSO's
# __kernel_rt_sigreturn into the interrupted interpreter.
mark "signal start"
"$ljprof" record -F 999 -q --folded "$out/signal.folded" -- /usr/bin/luajit \
  "$workloads/signal_interrupted.lua" /opt/libsignal_handler.so 2 1 >"$out/signal.out" \
  2>"$out/signal.log"
echo $? >"$out/signal.rc"

# A loop whose trace exits all the time (../workloads/trace_exits.lua): samples in the trace
# exit handler and in lj_trace_exit, under Tarantool's LuaJIT fork (symbols name lj_trace_exit)
# and Debian's luajit.
for runtime in "$@"; do
  name=${runtime%%=*}
  mark "${name}_trace_exits start"
  "$ljprof" record -F 999 -q --folded "$out/${name}_trace_exits.folded" -- "${runtime#*=}" \
    "$workloads/trace_exits.lua" 4 "$out/${name}_trace_exits.report" \
    >"$out/${name}_trace_exits.log" 2>&1
  echo $? >"$out/${name}_trace_exits.rc"
done

# The Tarantool in miniature (tests/walker/workloads/mini_tarantool.c, built by the host test
# with the arm64 Tarantool LuaJIT fork; no package has an arm64 tarantool) running mini_live.lua:
# a live `fibers` snapshot of its two cords, a wall-clock profile of them, then a recording
# labelled by fiber, between two of its own reports of its spinning fibers' CPU time.
if [ -x /opt/mini/tarantool ]; then
  mark "mini tarantool start"
  /opt/mini/tarantool /opt/mini/mini_live.lua /tmp/mini.report 300 >"$out/mini.out" 2>&1 &
  mini=$!
  wait_for_line "$out/mini.out" '^ready'
  "$ljprof" fibers -p "$mini" --json >"$out/mini_fibers.json" 2>"$out/mini_fibers.log"
  echo $? >"$out/mini_fibers.rc"
  "$ljprof" fibers -p "$mini" --sample 20 -d 2 --folded "$out/mini_wall.folded" \
    >"$out/mini_wall.log" 2>&1
  echo $? >"$out/mini_wall.rc"
  cp /tmp/mini.report "$out/mini.before"
  "$ljprof" record -p "$mini" -F 999 -d "$seconds" -q --group-by fiber \
    --folded "$out/mini.folded" >"$out/mini.log" 2>&1
  echo $? >"$out/mini.rc"
  cp /tmp/mini.report "$out/mini.after"
  kill "$mini"
fi

# A core the arm64 kernel writes (an NT_ARM_TLS note per thread, which qemu-user cores lack) of
# /opt/tls_threads (tests/core/workloads/tls_threads.c, cross-built by the host test), whose
# threads print their own thread pointers before it aborts.
mark "tls core start"
(
  ulimit -c unlimited
  echo "$out/tls_threads.core" >/proc/sys/kernel/core_pattern
  cd /tmp && /opt/tls_threads abort >"$out/tls_threads.out" 2>&1
)

mark done
touch /tmp/recordings-done
wait "$counter"
echo "after $(bpf_programs)" >>"$out/bpf_programs"
