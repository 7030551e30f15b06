/* record_capture.bpf.h: part of record.bpf.c (included once, after its maps and the walker):
 * the copies a sample takes of a young process's objects — each Lua frame's prototype, chunk
 * name and first string constants, each JIT trace — so the agent can name its frames after the
 * process is gone (src/proc/captured_memory.h reads them back). */
#ifndef LJPROF_BPF_RECORD_CAPTURE_BPF_H
#define LJPROF_BPF_RECORD_CAPTURE_BPF_H

/* Copies [addr, addr + len) of the sampled process (its current task) into the events ring,
 * unless this (pid, what, addr) was copied at `version` already. Returns 1 if it wrote a record.
 * A global function: the verifier checks it once, not once per call site. */
__attribute__((noinline)) int lj_rec_capture(uint32_t pid, uint32_t what, uint64_t addr,
                                             uint64_t len, uint64_t version) {
  struct lj_rec_capture_key key;
  struct lj_rec_capture* c;
  uint64_t* seen;
  uint32_t zero = 0;
  if (addr == 0 || len == 0) return 0;
  key.pid = pid;
  key.what = what;
  key.addr = addr;
  seen = bpf_map_lookup_elem(&captured, &key);
  if (seen && *seen == version) return 0;
  c = bpf_map_lookup_elem(&capture_scratch, &zero);
  if (!c) return 0;
  /* 64 bits wide: a 32-bit length is compared zero-extended in a copy while the helper gets the
   * unextended register, which the verifier then cannot bound. */
  if (len >= LJ_REC_CAPTURE_MAX) len = LJ_REC_CAPTURE_MAX - 1;
  barrier_var(len);
  len &= LJ_REC_CAPTURE_MAX - 1;
  if (bpf_probe_read_user(c->bytes, len, (const void*)addr) != 0) {
    count(LJ_REC_CTR_CAPTURE_FAULT);
    return 0;
  }
  c->kind = LJ_REC_KIND_CAPTURE;
  c->pid = pid;
  c->addr = addr;
  c->len = (uint32_t)len;
  c->what = what;
  if (bpf_ringbuf_output(&events, c, __builtin_offsetof(struct lj_rec_capture, bytes) + len, 0) !=
      0) {
    count(LJ_REC_CTR_RINGBUF_FULL);
    return 0;
  }
  bpf_map_update_elem(&captured, &key, &version, BPF_ANY);
  count(LJ_REC_CTR_CAPTURES);
  return 1;
}

/* The GCstr at `str` (lj_obj.h: GCHeader, ..., MSize len at str_len, text at str_data): its
 * header and up to LJ_REC_CAPTURE_STRING_MAX bytes of text. `check_type`: only if its GCHeader.gct
 * says string (~LJ_TSTR, lj_obj.h; the byte after the header's GCRef and `marked`), for
 * constants read from a prototype's kgc array, which also holds tables, functions and cdata. */
__attribute__((noinline)) int lj_rec_capture_string(const struct lj_luajit_info* lj, uint32_t pid,
                                                    uint64_t str, uint32_t check_type) {
  uint32_t len = 0;
  uint8_t gct = 0;
  if (!lj || str == 0 || lj->str_len < 0 || lj->str_data < 0 || lj->str_data > 64) return 0;
  if (check_type && (bpf_probe_read_user(&gct, 1, (const void*)(str + lj->ref_size + 1)) != 0 ||
                     gct != (uint8_t)~4u)) {
    return 0;
  }
  if (bpf_probe_read_user(&len, 4, (const void*)(str + (uint32_t)lj->str_len)) != 0) {
    count(LJ_REC_CTR_CAPTURE_FAULT);
    return 0;
  }
  if (len > LJ_REC_CAPTURE_STRING_MAX) len = LJ_REC_CAPTURE_STRING_MAX;
  return lj_rec_capture(pid, LJ_REC_CAPTURE_STRING, str, (uint32_t)lj->str_data + len + 1, len);
}

/* The first LJ_REC_CAPTURE_KGC string constants of a prototype (lj_obj.h proto_kgc: GCRefs
 * counted down from GCproto.k): the names call sites read (lj_debug.c: GGET, TGETS, method
 * names). */
__attribute__((noinline)) int lj_rec_capture_kgc(const struct lj_luajit_info* lj, uint32_t pid,
                                                 uint64_t k, uint32_t sizekgc) {
  uint32_t d, n = 0, ref_size;
  if (!lj || k == 0) return 0;
  ref_size = lj->ref_size == 8 ? 8 : 4;
  for (d = 0; d < LJ_REC_CAPTURE_KGC; d++) {
    uint64_t str = 0;
    if (d >= sizekgc) break;
    if (bpf_probe_read_user(&str, ref_size, (const void*)(k - (uint64_t)(d + 1) * ref_size)) != 0)
      break;
    n += lj_rec_capture_string(lj, pid, str, 1);
  }
  return (int)n;
}

/* What a sample copies of a young process: the prototype of each Lua frame with its chunk name
 * and string constants, and each JIT trace, within LJ_REC_CAPTURE_PER_SAMPLE records (the
 * next sample copies what this one left). */
struct capture_ctx {
  const struct lj_luajit_info* lj;
  const struct lj_rec_sample* sample;
  uint32_t pid;
  uint32_t budget;
};

LJ_INLINE void capture_proto(struct capture_ctx* k, const struct lj_rec_frame* f) {
  const struct lj_luajit_info* lj = k->lj;
  uint32_t sizept = 0, sizekgc = 0;
  uint64_t kref = 0;
  if (bpf_probe_read_user(&sizept, 4, (const void*)(f->proto + lj->pt_sizept)) != 0) {
    count(LJ_REC_CTR_CAPTURE_FAULT);
    return;
  }
  /* The version: what the agent checks a prototype by (chunk name, first line), and its size. */
  if (!lj_rec_capture(k->pid, LJ_REC_CAPTURE_PROTO, f->proto, sizept,
                      f->chunkname ^ ((uint64_t)(uint32_t)f->firstline << 32) ^ sizept)) {
    return; /* copied before: so were its strings */
  }
  k->budget -= 1;
  k->budget -= (uint32_t)lj_rec_capture_string(lj, k->pid, f->chunkname, 0);
  if (lj_read_ref(0, lj, f->proto + lj->pt_k, &kref) != 0 ||
      bpf_probe_read_user(&sizekgc, 4, (const void*)(f->proto + lj->pt_sizekgc)) != 0) {
    return;
  }
  k->budget -= (uint32_t)lj_rec_capture_kgc(lj, k->pid, kref, sizekgc);
}

LJ_INLINE void capture_trace(struct capture_ctx* k, const struct lj_rec_frame* f) {
  const struct lj_luajit_info* lj = k->lj;
  uint64_t snapmap = 0;
  uint32_t nsnapmap = 0;
  if (bpf_probe_read_user(&snapmap, 8, (const void*)(f->b + lj->tr_snapmap)) != 0 ||
      bpf_probe_read_user(&nsnapmap, 4, (const void*)(f->b + lj->tr_nsnapmap)) != 0) {
    count(LJ_REC_CTR_CAPTURE_FAULT);
    return;
  }
  /* lj_trace.c trace_save: the snapshot map is the block's last vector (SnapEntry: 4 bytes). */
  if (snapmap <= f->b || nsnapmap > (1u << 20) ||
      snapmap + (uint64_t)nsnapmap * 4 - f->b > (1u << 24))
    return;
  k->budget -= (uint32_t)lj_rec_capture(k->pid, LJ_REC_CAPTURE_TRACE, f->b,
                                        (uint32_t)(snapmap + (uint64_t)nsnapmap * 4 - f->b),
                                        f->traceno ^ (snapmap << 16));
}

static long capture_frame(uint64_t i, void* ctx) {
  struct capture_ctx* k = ctx;
  const struct lj_rec_frame* f;
  if (i >= LJ_WALK_MAX_FRAMES || k->budget == 0 || k->budget > LJ_REC_CAPTURE_PER_SAMPLE) return 1;
  f = &k->sample->frames[i];
  if (f->kind == LJ_FRAME_LUA && f->proto != 0) capture_proto(k, f);
  if (f->kind == LJ_FRAME_TRACE && f->traceno != 0) capture_trace(k, f);
  return 0;
}

#endif /* LJPROF_BPF_RECORD_CAPTURE_BPF_H */
