/* Host directories in the guest: a FUSE mount whose requests go to the host over a stream,
 * unchanged, and whose replies come back the same way. The FUSE protocol delimits itself (every
 * message starts with its length), so the agent only moves bytes: one read of /dev/fuse is one
 * request, sent as DATA on channel 1 under the host's credit; the host's replies arrive on
 * channel 0 and each whole one is one write. What a request may do is decided on the host,
 * which answers from the shared directory (src/core/host-dirs/). */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define FUSE_BUF (132 * 1024)   /* the kernel wants room for max_write (128 KiB) and a header */
#define FUSE_OUT_HDR 16
#define FUSE_MAX_REPLY (MAX_PAYLOAD) /* no reply the host sends may be larger */

static void share_rearm(sess *s) {
  if (s->fd < 0 || s->closing) return;
  /* Reading stops while the host has not granted room for a whole request. */
  watch_fd(s->fd, s->credit[CH_OUT] >= FUSE_BUF && outq_bytes() < OUTQ_HIGH ? EPOLLIN : 0, s);
}

static void share_free(sess *s);

void op_share(uint32_t id, const jdoc *d) {
  char *path = req_str(d, "path");
  int ro = req_bool(d, "readonly", 0);
  if (!path || path[0] != '/' || !path[1]) { send_error(id, "EINVAL", "\"path\" must be an absolute path below /"); free(path); return; }
  struct stat st;
  if (stat("/dev/fuse", &st) < 0 && mknod("/dev/fuse", S_IFCHR | 0666, makedev(10, 229)) < 0) { send_errno(id, errno, "/dev/fuse"); free(path); return; }
  int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) { send_errno(id, errno, "/dev/fuse"); free(path); return; }
  if (mkdir_parents(path, 0755) < 0) { send_errno(id, errno, path); close(fd); free(path); return; }
  char opts[160];
  snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=131072", fd);
  if (mount("forgevm", path, "fuse.forgevm", MS_NOSUID | MS_NODEV | (ro ? MS_RDONLY : 0), opts) < 0) {
    send_errno(id, errno, path);
    close(fd);
    free(path);
    return;
  }
  sess *s = sess_new(id, S_SHARE);
  if (!s) { umount2(path, MNT_DETACH); close(fd); free(path); send_errno(id, ENOMEM, "share"); return; }
  s->on_free = share_free;
  s->fd = fd;
  s->final_path = path;
  s->credit[CH_OUT] = INITIAL_WINDOW;
  send_frame(id, K_EVENT, 0, 0, "{\"event\":\"mounted\"}", 19);
  share_rearm(s);
}

void share_on_fd(sess *s) {
  static char *buf;
  if (!buf && !(buf = malloc(FUSE_BUF))) return;
  while (!s->closing && s->credit[CH_OUT] >= FUSE_BUF && outq_bytes() < OUTQ_HIGH) {
    ssize_t r = read(s->fd, buf, FUSE_BUF);
    if (r < 0 && (errno == EINTR || errno == ENOENT)) continue; /* ENOENT: interrupted before we read it */
    if (r < 0 && errno == EAGAIN) break;
    if (r <= 0) { /* ENODEV: unmounted in the guest; the stream ends */
      s->closing = 2;
      send_ok(s->id);
      break;
    }
    s->credit[CH_OUT] -= r;
    for (ssize_t off = 0; off < r; off += DATA_CHUNK) send_frame(s->id, K_DATA, CH_OUT, 0, buf + off, (size_t)(r - off < DATA_CHUNK ? r - off : DATA_CHUNK));
  }
  share_rearm(s);
}

void share_on_data(sess *s, const uint8_t *p, size_t n, int eof) {
  if (s->closing) { if (n) send_window(s->id, CH_IN, (uint32_t)n); return; }
  if (n && sess_buffer_input(s, p, n) < 0) { s->closing = 1; return; }
  while (s->inlen - s->inoff >= FUSE_OUT_HDR) {
    const uint8_t *m = (const uint8_t *)s->inbuf + s->inoff;
    uint32_t len = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24;
    if (len < FUSE_OUT_HDR || len > FUSE_MAX_REPLY) { alog("share %u: bad reply length %u", s->id, len); s->closing = 1; return; }
    if (s->inlen - s->inoff < len) break;
    /* ENOENT: the request was interrupted meanwhile; anything else the kernel refuses is the host's problem */
    if (write(s->fd, m, len) < 0 && errno != ENOENT) alog("share %u: reply refused: %s", s->id, strerror(errno));
    s->inoff += len;
    send_window(s->id, CH_IN, len);
  }
  if (s->inoff == s->inlen) s->inoff = s->inlen = 0;
  else if (s->inoff > 0) {
    memmove(s->inbuf, s->inbuf + s->inoff, s->inlen - s->inoff);
    s->inlen -= s->inoff;
    s->inoff = 0;
  }
  if (eof) s->closing = 1;
}

void share_on_window(sess *s, uint32_t n) {
  s->credit[CH_OUT] += n;
  if (s->credit[CH_OUT] > (int64_t)INITIAL_WINDOW * 64) s->credit[CH_OUT] = (int64_t)INITIAL_WINDOW * 64;
  share_rearm(s);
}

void share_tick(sess *s) {
  if (!s->closing) { share_rearm(s); return; }
  if (s->closing == 1) send_frame(s->id, K_RES, 0, 0, "{\"ok\":true,\"closed\":true}", 25);
  sess_free(s);
}

/* The mount goes with its stream (the host closed it, or is gone): detached, so a process still
 * inside it does not keep it. */
static void share_free(sess *s) {
  if (s->final_path) umount2(s->final_path, MNT_DETACH);
}
