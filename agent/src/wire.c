/* The wire, host-bound: frame headers, the queue of frames waiting for the host channel (and the
 * hold that stops it before a save), replies and error codes, and the fields of a request. The
 * operations and the event loop (main.c) both use it; it calls neither. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct frame {
  struct frame *next;
  size_t len, off;
  int hold; /* once this frame is out, send nothing more until the host continues (op hold) */
  uint8_t data[];
} frame;
static frame *outq_head, *outq_tail;
static size_t outq_total;
/* A host about to save this VM holds the channel: nothing is written to the port, so no frame
 * can be half-sent or lost when the VMM goes away; requests are still read and answered into
 * the queue, which goes out once a host continues (hello "continue") or releases the hold. */
static int held = 0;

size_t outq_bytes(void) { return outq_total; }
int outq_waiting(void) { return outq_head && !held; }
int outq_held(void) { return held; }
void outq_release(void) { held = 0; }

/* hold: once the frame queued last is out, nothing more is written until outq_release. */
void outq_hold_last(void) {
  if (outq_tail) outq_tail->hold = 1;
}

/* Writes queued frames to fd until it would block, the queue is empty, or a hold begins. */
void outq_flush(int fd) {
  while (outq_head && !held) {
    frame *f = outq_head;
    ssize_t w = write(fd, f->data + f->off, f->len - f->off);
    if (w <= 0) break;
    f->off += (size_t)w;
    outq_total -= (size_t)w;
    if (f->off < f->len) break;
    outq_head = f->next;
    if (!outq_head) outq_tail = NULL;
    if (f->hold) held = 1;
    free(f);
  }
}

/* Calls fn with each DATA frame still wholly in the queue (none of it written), oldest first. */
void outq_each_data(void (*fn)(uint32_t id, uint8_t chan, const uint8_t *p, size_t n)) {
  for (frame *f = outq_head; f; f = f->next)
    if (f->off == 0 && f->data[8] == K_DATA && f->len > HDR_SIZE) fn(get_le32(f->data + 4), f->data[9], f->data + HDR_SIZE, f->len - HDR_SIZE);
}

/* Discards every queued frame, a half-written one too, and ends a hold. */
void outq_clear(void) {
  held = 0;
  while (outq_head) {
    frame *f = outq_head;
    outq_head = f->next;
    free(f);
  }
  outq_tail = NULL;
  outq_total = 0;
}

/* Puts the frame just queued (a HELLO) before everything else waiting to go. */
void outq_tail_to_front(void) {
  if (!outq_head || outq_head == outq_tail) return;
  frame *prev = outq_head;
  while (prev->next != outq_tail) prev = prev->next;
  frame *t = outq_tail;
  prev->next = NULL;
  outq_tail = prev;
  t->next = outq_head;
  outq_head = t;
}

void send_frame(uint32_t id, uint8_t kind, uint8_t chan, uint8_t flags, const void *p, size_t n) {
  if (n > MAX_PAYLOAD) {
    /* Never emit a frame the host would reject; report the failure instead. */
    if (kind == K_RES) send_error(id, "E2BIG", "response too large (%zu bytes)", n);
    return;
  }
  frame *f = malloc(sizeof(frame) + HDR_SIZE + n);
  if (!f) { alog("out of memory queueing frame"); return; }
  f->next = NULL;
  f->len = HDR_SIZE + n;
  f->off = 0;
  f->hold = 0;
  put_le32(f->data, (uint32_t)n);
  put_le32(f->data + 4, id);
  f->data[8] = kind;
  f->data[9] = chan;
  f->data[10] = flags;
  f->data[11] = 0;
  if (n) memcpy(f->data + HDR_SIZE, p, n);
  if (outq_tail) outq_tail->next = f; else outq_head = f;
  outq_tail = f;
  outq_total += f->len;
}

void send_json(uint32_t id, uint8_t kind, jbuf *b) {
  if (b->oom) { send_error(id, "ENOMEM", "agent out of memory"); return; }
  send_frame(id, kind, 0, 0, b->buf, b->len);
}

void send_error(uint32_t id, const char *code, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":false,\"error\":{\"code\":");
  jb_str(&b, code, strlen(code));
  jb_cstr(&b, ",\"message\":");
  jb_str(&b, msg, strlen(msg));
  jb_cstr(&b, "}}");
  send_frame(id, K_RES, 0, 0, b.buf, b.len);
  jb_free(&b);
}

void send_errno(uint32_t id, int err, const char *what) {
  send_error(id, errno_code(err), "%s: %s", what, strerror(err));
}

void send_ok(uint32_t id) { send_frame(id, K_RES, 0, 0, "{\"ok\":true}", 11); }

void send_window(uint32_t id, uint8_t chan, uint32_t n) {
  uint8_t p[4];
  put_le32(p, n);
  send_frame(id, K_WINDOW, chan, 0, p, 4);
}

static const struct { int e; const char *n; } errnames[] = {
  {ENOENT, "ENOENT"}, {EACCES, "EACCES"}, {EPERM, "EPERM"}, {EEXIST, "EEXIST"}, {ENOTDIR, "ENOTDIR"},
  {EISDIR, "EISDIR"}, {ENOTEMPTY, "ENOTEMPTY"}, {EINVAL, "EINVAL"}, {ENOSPC, "ENOSPC"}, {EDQUOT, "EDQUOT"},
  {EROFS, "EROFS"}, {ELOOP, "ELOOP"}, {ENAMETOOLONG, "ENAMETOOLONG"}, {EBUSY, "EBUSY"}, {EXDEV, "EXDEV"},
  {ENOMEM, "ENOMEM"}, {EMFILE, "EMFILE"}, {ENFILE, "ENFILE"}, {ETXTBSY, "ETXTBSY"}, {EFBIG, "EFBIG"},
  {ESRCH, "ESRCH"}, {EAGAIN, "EAGAIN"}, {EIO, "EIO"}, {ECONNREFUSED, "ECONNREFUSED"},
  {ECONNRESET, "ECONNRESET"}, {ETIMEDOUT, "ETIMEDOUT"}, {EADDRINUSE, "EADDRINUSE"},
  {EADDRNOTAVAIL, "EADDRNOTAVAIL"}, {ENETUNREACH, "ENETUNREACH"}, {EHOSTUNREACH, "EHOSTUNREACH"},
};

const char *errno_code(int err) {
  for (size_t i = 0; i < sizeof errnames / sizeof *errnames; i++)
    if (errnames[i].e == err) return errnames[i].n;
  return "EIO";
}

char *req_str(const jdoc *d, const char *key) { return json_strdup(d, json_get(d, 0, key), NULL); }
int req_int(const jdoc *d, const char *key, int64_t def, int64_t *out) {
  int t = json_get(d, 0, key);
  *out = def;
  if (t < 0) return 0;
  if (d->toks[t].type == J_PRIM && d->src[d->toks[t].start] == 'n') return 0; /* null */
  return json_int(d, t, out);
}
int req_bool(const jdoc *d, const char *key, int def) {
  int v = json_bool(d, json_get(d, 0, key));
  return v < 0 ? def : v;
}
