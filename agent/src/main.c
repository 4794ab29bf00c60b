/* ForgeVM guest agent: PID 1 of every VM. Boots the guest (system.c), then serves the host over
 * one virtio-serial port with a framed, multiplexed protocol. Single-threaded: every source of
 * work is a file descriptor in one epoll set, so a long exec never blocks a file read. This file
 * is the top of the agent: the loop, the port and the host's HELLO. Requests reach their
 * handlers through dispatch.c; frames go out through wire.c's queue. Nothing calls into it. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>
#include <dirent.h>

static int port_fd = -1;
static int out_fd = -1; /* where frames are written: port_fd, except with --stdio (fd 1) */
static int port_connected = 0; /* host side of the port is open */
static int sig_fd = -1;

/* Tags for epoll data that are not sessions. */
static int tag_port, tag_port_out, tag_sig, tag_pids;

static void drop_sessions(int keep_processes);
static void on_host_hello(const uint8_t *p, size_t n);

static void on_frame(uint32_t id, uint8_t kind, uint8_t chan, uint8_t flags, const uint8_t *p, size_t n) {
  sess *s;
  switch (kind) {
    case K_HELLO:
      on_host_hello(p, n);
      break;
    case K_REQ:
      dispatch(id, p, n);
      break;
    case K_DATA:
      s = sess_find(id);
      if (!s) break; /* stream already ended (e.g. after an error reply): drop */
      if (s->type == S_EXEC && chan == CH_IN) exec_on_data(s, p, n, flags & F_EOF);
      else if (s->type == S_WRITE && chan == CH_IN) write_on_data(s, p, n, flags & F_EOF);
      else if (s->type == S_TCP && chan == CH_IN) net_on_data(s, p, n, flags & F_EOF);
      else if (s->type == S_SHARE && chan == CH_IN) share_on_data(s, p, n, flags & F_EOF);
      break;
    case K_WINDOW:
      if (n != 4 || chan > CH_ERR) break;
      s = sess_find(id);
      if (!s) break;
      if (s->type == S_EXEC) exec_on_window(s, chan, get_le32(p));
      else if (s->type == S_TCP && chan == CH_OUT) net_on_window(s, get_le32(p));
      else if (s->type == S_SHARE && chan == CH_OUT) share_on_window(s, get_le32(p));
      else if (s->type == S_READ && chan == CH_OUT) {
        s->credit[CH_OUT] += get_le32(p);
        if (s->credit[CH_OUT] > (int64_t)MAX_PAYLOAD * 64) s->credit[CH_OUT] = (int64_t)MAX_PAYLOAD * 64;
      }
      break;
    default:
      if (id) send_error(id, "EPROTO", "unknown frame kind %u", kind);
      break;
  }
}

/* ---- port I/O ---- */
static uint8_t *inbuf;
static size_t inlen;
static uint64_t skip_left; /* bytes of an oversized frame still to discard */

static void port_read(void) {
  for (;;) {
    if (inlen == HDR_SIZE + MAX_PAYLOAD) break;
    ssize_t r = read(port_fd, inbuf + inlen, HDR_SIZE + MAX_PAYLOAD - inlen);
    if (r <= 0) break;
    inlen += (size_t)r;
    size_t off = 0;
    for (;;) {
      if (skip_left) {
        size_t k = inlen - off < skip_left ? inlen - off : (size_t)skip_left;
        off += k;
        skip_left -= k;
        if (skip_left) break;
      }
      if (inlen - off < HDR_SIZE) break;
      uint32_t n = get_le32(inbuf + off);
      uint32_t id = get_le32(inbuf + off + 4);
      if (n > MAX_PAYLOAD) {
        /* The header is still self-consistent, so resynchronise by discarding the payload. */
        send_error(id, "E2BIG", "frame of %u bytes exceeds the %u byte limit", n, MAX_PAYLOAD);
        off += HDR_SIZE;
        skip_left = n;
        continue;
      }
      if (inlen - off < HDR_SIZE + n) break;
      on_frame(id, inbuf[off + 8], inbuf[off + 9], inbuf[off + 10], inbuf + off + HDR_SIZE, n);
      off += HDR_SIZE + n;
    }
    memmove(inbuf, inbuf + off, inlen - off);
    inlen -= off;
  }
}

static void port_flush(void) { outq_flush(out_fd); }

static void port_watch_update(void) {
  if (port_fd < 0 || !port_connected) return;
  int out = outq_waiting();
  if (out_fd == port_fd) {
    watch_fd(port_fd, EPOLLIN | (out ? EPOLLOUT : 0), &tag_port);
  } else {
    watch_fd(port_fd, EPOLLIN, &tag_port);
    watch_fd(out_fd, out ? EPOLLOUT : 0, &tag_port_out);
  }
}

/* Streams and queued output of a host that is gone: nobody will read the output or answer for
 * the requests, so transfers are dropped and queued output (possibly a half-written frame)
 * discarded. Processes in flight are detached, kept for a host to adopt (exec_detach), or killed
 * when a host that restores a snapshot says so; a kept process's queued output is kept with it
 * (exec_keep_queued), so the host that adopts it reads every byte a held channel kept back. */
static int sessions_dropped; /* sessions were freed during the current epoll batch */
static void drop_sessions(int keep_processes) {
  sessions_dropped = 1;
  if (keep_processes) outq_each_data(exec_keep_queued);
  for (sess *s = sessions, *next; s; s = next) {
    next = s->next;
    if (s->type == S_EXEC && keep_processes) { exec_detach(s); continue; }
    if (s->type == S_EXEC && !s->exited) kill(-s->pid, SIGKILL);
    sess_free(s);
  }
  net_drop_pending();
  outq_clear();
}

/* The host went away (the server stopped, crashed or is being upgraded): its streams go, and so
 * does any half-read frame, so that the next host starts on a frame boundary with a fresh HELLO.
 * Its processes run on, detached, for the next host to adopt: a server's restart ends no work. */
static void drop_host_state(void) {
  drop_sessions(1);
  inlen = 0;
  skip_left = 0;
}

/* A host that did not see this guest boot (a restored snapshot or fork) introduces itself with a
 * HELLO frame: the guest still holds the streams of the host it was saved from, which are
 * dropped — or, with "keep" (a paused sandbox resuming with its host's successor), its
 * processes run on detached (feature keep-processes). With "continue" the host is the one that
 * held this channel before the save and still has every stream's state: nothing is dropped, the
 * reply says "continued", and the output queued while held follows it (feature
 * continue-sessions). The reply HELLO echoes the host's nonce so the host can tell it from stale
 * bytes that were in flight when the snapshot was taken. */
static void on_host_hello(const uint8_t *p, size_t n) {
  char nonce[65] = {0};
  int keep = 0, cont = 0;
  if (n) {
    jdoc d;
    if (json_parse(&d, (const char *)p, (int)n, 64) == 0 && d.toks[0].type == J_OBJ) {
      char *v = req_str(&d, "nonce");
      if (v && strlen(v) < sizeof nonce) strcpy(nonce, v);
      free(v);
      keep = req_bool(&d, "keep", 0) == 1;
      cont = req_bool(&d, "continue", 0) == 1;
    }
    json_free(&d);
  }
  /* Only a channel that was held can go on: otherwise a frame may have been half-written. */
  if (cont && outq_held()) {
    outq_release();
    op_hello_as(0, nonce[0] ? nonce : NULL, 1);
    outq_tail_to_front();
    port_watch_update();
    return;
  }
  drop_sessions(keep);
  op_hello(0, nonce[0] ? nonce : NULL);
}

/* virtio-serial reports POLLHUP while no host is attached; it must leave the epoll set then or
 * the loop would spin. It is polled on a timer until the host is back, then hello is sent again. */
static void port_check_connected(void) {
  struct pollfd p = {.fd = port_fd, .events = POLLIN};
  poll(&p, 1, 0);
  int connected = !(p.revents & POLLHUP);
  /* A socket the host handed over (--fd) never comes back once closed: the sandbox ends. */
  if (!connected && host_fd_mode) power_off();
  if (connected && !port_connected) {
    port_connected = 1;
    op_hello(0, NULL);
    port_watch_update();
  } else if (!connected && port_connected) {
    port_connected = 0;
    unwatch_fd(port_fd);
    drop_host_state();
  }
}

static int open_port(void) {
  for (int tries = 0; tries < 1000; tries++) {
    DIR *dir = opendir("/sys/class/virtio-ports");
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
      if (e->d_name[0] == '.') continue;
      char path[300], name[128] = {0};
      snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ssize_t r = read(fd, name, sizeof name - 1);
      close(fd);
      if (r > 0 && name[r - 1] == '\n') name[r - 1] = 0;
      if (strcmp(name, PORT_NAME)) continue;
      snprintf(path, sizeof path, "/dev/%s", e->d_name);
      closedir(dir);
      return open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    }
    if (dir) closedir(dir);
    usleep(10000);
  }
  errno = ENOENT;
  return -1;
}

static void on_sigchld(void) {
  struct signalfd_siginfo si;
  while (read(sig_fd, &si, sizeof si) == sizeof si) {
  }
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) exec_reap(pid, status);
}

/* "--fd N": the host channel is an inherited socket, not a virtio port (the local provider runs
 * the agent in Linux namespaces, without a VM). "--stdio": it is read from fd 0 and written to
 * fd 1 (the remote providers run the agent as a process in a sandbox of another server). */
static int stdio_mode;
static int parse_fd_arg(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--stdio")) { stdio_mode = 1; return 0; }
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--fd")) continue;
    char *end;
    long fd = strtol(argv[i + 1], &end, 10);
    if (*end || fd < 0 || fd > 1023) return -1;
    return (int)fd;
  }
  return -1;
}

int main(int argc, char **argv) {
  int given_fd = parse_fd_arg(argc, argv);
  host_fd_mode = given_fd >= 0;
  if (getpid() == 1) boot_init();
  else for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--service")) service_init();

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);

  epfd = epoll_create1(EPOLL_CLOEXEC);
  inbuf = malloc(HDR_SIZE + MAX_PAYLOAD);
  if (host_fd_mode) {
    port_fd = given_fd;
    out_fd = stdio_mode ? 1 : given_fd;
    for (int fd = port_fd; ; fd = out_fd) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
      if (fd == out_fd) break;
    }
  } else {
    port_fd = open_port();
    out_fd = port_fd;
  }
  if (port_fd < 0 || !inbuf || epfd < 0 || sig_fd < 0) {
    alog("cannot open the host channel %s: %s", PORT_NAME, strerror(errno));
    if (service_mode) exit(1); /* systemd starts it again */
    for (;;) pause(); /* PID 1 must not exit; the host times out and shows this log */
  }
  watch_fd(sig_fd, EPOLLIN, &tag_sig);
  if (pids_guard_fd() >= 0) watch_fd(pids_guard_fd(), EPOLLPRI, &tag_pids);
  port_check_connected();

  struct epoll_event evs[64];
  for (;;) {
    uint64_t now = now_ms();
    int timeout = port_connected ? -1 : 50;
    int busy = 0;
    for (sess *s = sessions, *nx; s; s = nx) {
      nx = s->next;
      if (s->type == S_READ) busy |= read_pump(s);
      else if (s->type == S_EXEC) exec_tick(s, now);
      else if (s->type == S_TCP || s->type == S_LISTEN) net_tick(s, now);
      else if (s->type == S_WATCH) watch_tick(s);
      else if (s->type == S_SHARE) share_tick(s);
    }
    for (sess *s = sessions; s; s = s->next) {
      if (s->type != S_EXEC) continue;
      uint64_t dl = exec_next_deadline(s);
      if (!dl) continue;
      int t = dl <= now ? 0 : (int)(dl - now);
      if (timeout < 0 || t < timeout) timeout = t;
    }
    if (busy) timeout = 0;
    port_flush();
    if (shutdown_requested && !outq_bytes()) power_off();
    port_watch_update();
    int n = epoll_wait(epfd, evs, 64, timeout);
    sessions_dropped = 0;
    for (int i = 0; i < n; i++) {
      void *tag = evs[i].data.ptr;
      if (tag == &tag_port) {
        if (evs[i].events & (EPOLLHUP | EPOLLERR)) { port_check_connected(); continue; }
        if (evs[i].events & EPOLLIN) port_read();
        if (evs[i].events & EPOLLOUT) port_flush();
      } else if (tag == &tag_port_out) {
        if (evs[i].events & (EPOLLHUP | EPOLLERR)) power_off(); /* the reader of our frames is gone */
        if (evs[i].events & EPOLLOUT) port_flush();
      } else if (tag == &tag_sig) {
        on_sigchld();
      } else if (tag == &tag_pids) {
        pids_guard_check();
      } else if (!sessions_dropped) { /* else the event may name a freed session */
        /* a session's fd; for exec pipes the low bits of the pointer say which stream */
        uintptr_t v = (uintptr_t)tag;
        sess *s = (sess *)(v & ~(uintptr_t)3);
        if (s->type == S_EXEC) exec_on_fd(s, (int)(v & 3), evs[i].events);
        else if (s->type == S_WATCH) watch_on_fd(s);
        else if (s->type == S_SHARE) share_on_fd(s);
        else net_on_fd(s, evs[i].events);
      }
    }
    if (!port_connected) port_check_connected();
  }
}
