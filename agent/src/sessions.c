/* Streams in flight (sessions) and the epoll set their descriptors are watched in. A session's
 * owner may give it an on_free hook for what only it knows how to release. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

int epfd = -1;
sess *sessions = NULL;

void watch_fd(int fd, uint32_t events, void *ptr) {
  struct epoll_event ev = {.events = events, .data.ptr = ptr};
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT) epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}
void unwatch_fd(int fd) { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL); }

sess *sess_find(uint32_t id) {
  for (sess *s = sessions; s; s = s->next)
    if (s->id == id) return s;
  return NULL;
}

sess *sess_new(uint32_t id, enum sess_type t) {
  sess *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->id = id;
  s->type = t;
  s->in_fd = s->out_fd = s->err_fd = s->fd = -1;
  s->as_uid = s->as_gid = -1;
  s->credit[CH_OUT] = s->credit[CH_ERR] = INITIAL_WINDOW;
  s->next = sessions;
  sessions = s;
  return s;
}

void sess_free(sess *s) {
  for (sess **pp = &sessions; *pp; pp = &(*pp)->next) {
    if (*pp == s) { *pp = s->next; break; }
  }
  int fds[] = {s->in_fd, s->out_fd, s->err_fd, s->fd};
  for (int i = 0; i < 4; i++) {
    if (fds[i] < 0) continue;
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= fds[j] == fds[i];
    if (!dup) { unwatch_fd(fds[i]); close(fds[i]); }
  }
  if (s->on_free) s->on_free(s);
  if (s->tmp_path) unlink(s->tmp_path);
  free(s->tmp_path);
  free(s->final_path);
  free(s->inbuf);
  free(s);
}

/* Queues bytes the host sent on a stream's input channel; -1 (nothing queued) when the host broke
 * its window or memory ran out. What was already written out goes first: a reader that takes a
 * little at a time leaves the buffer never quite empty, and without this its written-out head
 * would count against the window until new bytes were refused. */
int sess_buffer_input(sess *s, const uint8_t *p, size_t n) {
  if (s->inoff) {
    memmove(s->inbuf, s->inbuf + s->inoff, s->inlen - s->inoff);
    s->inlen -= s->inoff;
    s->inoff = 0;
  }
  if (s->inlen + n > 2 * INITIAL_WINDOW + MAX_PAYLOAD) return -1;
  char *nb = realloc(s->inbuf, s->inlen + n);
  if (!nb) return -1;
  s->inbuf = nb;
  memcpy(s->inbuf + s->inlen, p, n);
  s->inlen += n;
  return 0;
}
