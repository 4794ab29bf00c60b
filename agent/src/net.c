/* TCP tunnels: a host stream carried to a socket inside the guest, in either direction
 * (and listeners on unix sockets, whose connections are carried the same way).
 * The host asks the guest to `connect` to one of its own ports (published ports), or to
 * `listen` on a loopback port and hand over each accepted connection (the egress proxy's
 * guest end). Bytes flow as DATA frames: channel 0 host → guest, channel 1 guest → host, each
 * under the usual credit, so a slow reader on either side stalls only its own connection. */
#define _GNU_SOURCE
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_PENDING 64         /* accepted connections the host has not claimed yet */
#define PENDING_TTL_MS 10000   /* unclaimed after this long: closed */

static struct {
  int fd;
  uint32_t conn;
  uint64_t at;
} pending[MAX_PENDING];
static uint32_t next_conn = 1;

static void send_event(uint32_t id, const char *event, int64_t conn) {
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"event\":");
  jb_str(&b, event, strlen(event));
  if (conn > 0) {
    jb_cstr(&b, ",\"conn\":");
    jb_int(&b, conn);
  }
  jb_cstr(&b, "}");
  send_json(id, K_EVENT, &b);
  jb_free(&b);
}

/* Fills addr from the request's "addr" (IPv4 literal, default loopback) and "port". */
static int req_sockaddr(uint32_t id, const jdoc *d, struct sockaddr_in *sa) {
  int64_t port;
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  if (req_int(d, "port", -1, &port) < 0 || port < 1 || port > 65535) {
    send_error(id, "EINVAL", "\"port\" must be an integer from 1 to 65535");
    return -1;
  }
  sa->sin_port = htons((uint16_t)port);
  char *addr = req_str(d, "addr");
  int ok = inet_pton(AF_INET, addr ? addr : "127.0.0.1", &sa->sin_addr) == 1;
  free(addr);
  if (!ok) {
    send_error(id, "EINVAL", "\"addr\" must be an IPv4 address");
    return -1;
  }
  return 0;
}

static void tcp_rearm(sess *s) {
  if (s->fd < 0 || s->closing) return;
  uint32_t ev = 0;
  if (s->connecting) ev = EPOLLOUT;
  else {
    if (!s->rd_eof && s->credit[CH_OUT] > 0 && outq_bytes() < OUTQ_HIGH) ev |= EPOLLIN;
    if (s->inlen > s->inoff) ev |= EPOLLOUT;
  }
  if (!ev) unwatch_fd(s->fd);
  else watch_fd(s->fd, ev, s);
}

static sess *tcp_session(uint32_t id, int fd, int connecting) {
  sess *s = sess_new(id, S_TCP);
  if (!s) {
    close(fd);
    send_error(id, "ENOMEM", "agent out of memory");
    return NULL;
  }
  s->fd = fd;
  s->connecting = connecting;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!connecting) send_event(id, "connected", 0);
  tcp_rearm(s);
  return s;
}

/* A listening unix socket at `path` ("unix-listen": a forwarded ssh agent, which guest programs
 * find by name), `mode` and owner `uid`:`gid` set before anyone can connect. A socket left there
 * (by a listener of a VM this one was restored from) is replaced; any other file is refused. */
static int listen_unix(uint32_t id, const jdoc *d, const char *path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (path[0] != '/' || strlen(path) >= sizeof sa.sun_path) {
    send_error(id, "EINVAL", "\"path\" must be absolute and shorter than %d bytes", (int)sizeof sa.sun_path);
    return -1;
  }
  strcpy(sa.sun_path, path);
  int64_t mode, uid, gid;
  req_int(d, "mode", 0600, &mode);
  req_int(d, "uid", 0, &uid);
  req_int(d, "gid", 0, &gid);
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      send_error(id, "EEXIST", "%s exists and is not a socket", path);
      return -1;
    }
    unlink(path);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) { send_errno(id, errno, "socket"); return -1; }
  /* Made with no access at all, then opened to its owner: nobody connects in between. */
  mode_t old = umask(0777);
  int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (r < 0 || chown(path, (uid_t)uid, (gid_t)gid) < 0 || chmod(path, (mode_t)(mode & 0777)) < 0 || listen(fd, 128) < 0) {
    int err = errno;
    close(fd);
    send_errno(id, err, "listen");
    return -1;
  }
  return fd;
}

void op_listen(uint32_t id, const jdoc *d) {
  int fd;
  char *path = req_str(d, "path");
  if (path) {
    fd = listen_unix(id, d, path);
    free(path);
    if (fd < 0) return;
  } else {
    struct sockaddr_in sa;
    if (req_sockaddr(id, d, &sa) < 0) return;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { send_errno(id, errno, "socket"); return; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
      int err = errno;
      close(fd);
      send_errno(id, err, "listen");
      return;
    }
  }
  sess *s = sess_new(id, S_LISTEN);
  if (!s) { close(fd); send_error(id, "ENOMEM", "agent out of memory"); return; }
  s->fd = fd;
  watch_fd(fd, EPOLLIN, s);
  send_event(id, "listening", 0);
}

static void expire_pending(uint64_t now) {
  for (int i = 0; i < MAX_PENDING; i++) {
    if (pending[i].fd > 0 && now - pending[i].at > PENDING_TTL_MS) {
      close(pending[i].fd);
      pending[i].fd = 0;
    }
  }
}

static void listen_accept(sess *s) {
  for (;;) {
    int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    uint64_t now = now_ms();
    expire_pending(now);
    int slot = -1;
    for (int i = 0; i < MAX_PENDING && slot < 0; i++)
      if (pending[i].fd <= 0) slot = i;
    if (slot < 0) { close(fd); continue; } /* the host is not keeping up: refuse */
    pending[slot].fd = fd;
    pending[slot].conn = next_conn++;
    if (!next_conn) next_conn = 1;
    pending[slot].at = now;
    send_event(s->id, "accept", pending[slot].conn);
  }
}

void op_connect(uint32_t id, const jdoc *d) {
  int64_t conn;
  if (req_int(d, "conn", 0, &conn) == 0 && conn > 0) {
    /* claim a connection a listener accepted */
    for (int i = 0; i < MAX_PENDING; i++) {
      if (pending[i].fd > 0 && pending[i].conn == (uint32_t)conn) {
        int fd = pending[i].fd;
        pending[i].fd = 0;
        tcp_session(id, fd, 0);
        return;
      }
    }
    send_error(id, "ENOENT", "no accepted connection %lld is waiting", (long long)conn);
    return;
  }
  struct sockaddr_in sa;
  if (req_sockaddr(id, d, &sa) < 0) return;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) { send_errno(id, errno, "socket"); return; }
  int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  if (r < 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    send_errno(id, err, "connect");
    return;
  }
  tcp_session(id, fd, r < 0);
}

void op_close(uint32_t id, const jdoc *d) {
  int64_t target;
  if (req_int(d, "target", 0, &target) < 0) target = 0;
  sess *s = target > 0 ? sess_find((uint32_t)target) : NULL;
  if (s && (s->type == S_WRITE || s->type == S_READ)) {
    /* A transfer the host gave up (its client went, or sent a body that broke off): the write's
     * temporary file is removed, so nothing partial appears under the final name, and a read of
     * an endless file (/dev/zero) stops (feature close-transfers). */
    send_error(s->id, "ECANCELED", "the host ended the transfer");
    sess_free(s);
    send_ok(id);
    return;
  }
  if (!s || (s->type != S_TCP && s->type != S_LISTEN && s->type != S_WATCH && s->type != S_SHARE)) {
    send_error(id, "ENOENT", "no tunnel, listener, watch or transfer %lld", (long long)target);
    return;
  }
  /* freed by net_tick, outside the epoll batch that may still name it */
  if (s->fd >= 0) { unwatch_fd(s->fd); if (s->type != S_SHARE) shutdown(s->fd, SHUT_RDWR); }
  s->closing = 1;
  send_ok(id);
}

static void tcp_flush(sess *s) {
  while (s->inoff < s->inlen) {
    ssize_t w = send(s->fd, s->inbuf + s->inoff, s->inlen - s->inoff, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) break;
    if (w <= 0) { /* peer gone: discard, keep the host's credit flowing */
      s->in_unacked += (uint32_t)(s->inlen - s->inoff);
      s->inoff = s->inlen;
      s->wr_shut = 1;
      break;
    }
    s->inoff += (size_t)w;
    s->in_unacked += (uint32_t)w;
  }
  if (s->inoff == s->inlen) s->inoff = s->inlen = 0;
  if (s->in_unacked) { send_window(s->id, CH_IN, s->in_unacked); s->in_unacked = 0; }
  if (s->in_eof && s->inlen == 0 && !s->wr_shut) {
    shutdown(s->fd, SHUT_WR);
    s->wr_shut = 1;
  }
}

static void tcp_pump(sess *s) {
  static char buf[DATA_CHUNK];
  while (!s->rd_eof && s->credit[CH_OUT] > 0 && outq_bytes() < OUTQ_HIGH) {
    size_t want = s->credit[CH_OUT] < DATA_CHUNK ? (size_t)s->credit[CH_OUT] : DATA_CHUNK;
    ssize_t r = recv(s->fd, buf, want, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) break;
    if (r <= 0) {
      s->rd_eof = 1;
      if (r < 0) s->wr_shut = 1; /* reset: nothing more can be written either */
      send_frame(s->id, K_DATA, CH_OUT, F_EOF, NULL, 0);
      break;
    }
    s->credit[CH_OUT] -= r;
    send_frame(s->id, K_DATA, CH_OUT, 0, buf, (size_t)r);
    if ((size_t)r < want) break;
  }
}

void net_on_fd(sess *s, uint32_t events) {
  if (s->closing || s->fd < 0) return;
  if (s->type == S_LISTEN) { listen_accept(s); return; }
  if (s->connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      send_errno(s->id, err, "connect");
      unwatch_fd(s->fd);
      s->closing = 2; /* the error reply already ended the stream */
      return;
    }
    s->connecting = 0;
    send_event(s->id, "connected", 0);
  }
  if (events & EPOLLOUT) tcp_flush(s);
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) tcp_pump(s);
  tcp_rearm(s);
}

void net_on_data(sess *s, const uint8_t *p, size_t n, int eof) {
  if (s->type != S_TCP) return;
  if (s->wr_shut || s->closing) {
    if (n) send_window(s->id, CH_IN, (uint32_t)n);
    return;
  }
  if (n && sess_buffer_input(s, p, n) < 0) {
    /* Bytes that cannot be kept would leave a hole in the stream: end it, saying why. */
    send_error(s->id, "ENOBUFS", "the host sent more than the tunnel's window");
    unwatch_fd(s->fd);
    s->closing = 2;
    return;
  }
  if (eof) s->in_eof = 1;
  if (!s->connecting) tcp_flush(s);
  tcp_rearm(s);
}

void net_on_window(sess *s, uint32_t n) {
  if (s->type != S_TCP) return;
  s->credit[CH_OUT] += n;
  if (s->credit[CH_OUT] > (int64_t)INITIAL_WINDOW * 256) s->credit[CH_OUT] = (int64_t)INITIAL_WINDOW * 256;
  tcp_rearm(s);
}

void net_tick(sess *s, uint64_t now) {
  if (s->type == S_LISTEN && !s->closing) return;
  if (s->closing) {
    if (s->closing == 1) send_frame(s->id, K_RES, 0, 0, "{\"ok\":true,\"closed\":true}", 25);
    sess_free(s);
    return;
  }
  if (s->rd_eof && s->wr_shut) { /* both directions done */
    send_ok(s->id);
    sess_free(s);
    return;
  }
  tcp_rearm(s); /* output queue may have drained since */
  (void)now;
}

void net_drop_pending(void) {
  for (int i = 0; i < MAX_PENDING; i++) {
    if (pending[i].fd > 0) close(pending[i].fd);
    pending[i].fd = 0;
  }
}
