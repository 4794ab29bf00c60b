/* Directory watches: inotify on a directory (and, recursively, on the directories under it and
 * those created later), each change sent as an EVENT {"event":"fs","name","op"} with the name
 * relative to the watched directory. The stream runs until the host closes it (op close). When
 * the host is slow the kernel's queue fills and overflows: changes are lost, never our memory. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WATCHES 8192
#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_ATTRIB | IN_ONLYDIR)

struct watches {
  int n, cap, recursive;
  int paused; /* not read while the host's queue is full */
  int *wds;
  char **rel; /* each watched directory relative to the root ("" for the root) */
  char *root;
};

static struct watches *W(sess *s) { return (struct watches *)s->watch; }

static const char *rel_of(struct watches *w, int wd) {
  for (int i = 0; i < w->n; i++)
    if (w->wds[i] == wd) return w->rel[i];
  return NULL;
}

static int add_one(sess *s, const char *rel) {
  struct watches *w = W(s);
  if (w->n >= MAX_WATCHES) return -1;
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s%s%s", w->root, *rel ? "/" : "", rel) >= (int)sizeof path) return -1;
  int wd = inotify_add_watch(s->fd, path, WATCH_MASK);
  if (wd < 0) return -1;
  for (int i = 0; i < w->n; i++)
    if (w->wds[i] == wd) return 0; /* the same directory by another name */
  if (w->n == w->cap) {
    int cap = w->cap ? w->cap * 2 : 16;
    int *wds = realloc(w->wds, sizeof(int) * (size_t)cap);
    if (!wds) return -1;
    w->wds = wds;
    char **r = realloc(w->rel, sizeof(char *) * (size_t)cap);
    if (!r) return -1;
    w->rel = r;
    w->cap = cap;
  }
  w->wds[w->n] = wd;
  w->rel[w->n] = strdup(rel);
  w->n++;
  return 0;
}

/* Watches rel and, when recursive, every directory below it. */
static void add_tree(sess *s, const char *rel) {
  if (add_one(s, rel) < 0 || !W(s)->recursive) return;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s%s%s", W(s)->root, *rel ? "/" : "", rel);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char child[PATH_MAX];
    if (snprintf(child, sizeof child, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof child) continue;
    add_tree(s, child);
  }
  closedir(d);
}

static void watch_free(sess *s);

void op_watch(uint32_t id, const jdoc *d) {
  char *path = req_str(d, "path");
  if (!path || path[0] != '/') {
    send_error(id, "EINVAL", "\"path\" must be an absolute path");
    free(path);
    return;
  }
  struct stat st;
  if (stat(path, &st) < 0) { send_errno(id, errno, path); free(path); return; }
  if (!S_ISDIR(st.st_mode)) { send_error(id, "ENOTDIR", "%.200s is not a directory", path); free(path); return; }
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) { send_errno(id, errno, "inotify_init1"); free(path); return; }
  struct watches *w = calloc(1, sizeof *w);
  sess *s = w ? sess_new(id, S_WATCH) : NULL;
  if (!s) { close(fd); free(w); free(path); send_error(id, "ENOMEM", "agent out of memory"); return; }
  s->on_free = watch_free;
  s->fd = fd;
  s->watch = w;
  w->root = path;
  w->recursive = req_bool(d, "recursive", 0);
  add_tree(s, "");
  if (w->n == 0) {
    send_errno(id, errno ? errno : EACCES, path);
    sess_free(s);
    return;
  }
  watch_fd(fd, EPOLLIN, s);
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"event\":\"watching\"}");
  send_json(id, K_EVENT, &b);
  jb_free(&b);
}

static void send_change(sess *s, const char *rel, const char *name, const char *op) {
  char full[PATH_MAX];
  snprintf(full, sizeof full, "%s%s%s", rel, *rel && *name ? "/" : "", name);
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"event\":\"fs\",\"name\":");
  jb_str(&b, full, strlen(full));
  jb_cstr(&b, ",\"op\":");
  jb_str(&b, op, strlen(op));
  jb_cstr(&b, "}");
  send_json(s->id, K_EVENT, &b);
  jb_free(&b);
}

void watch_on_fd(sess *s) {
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  while (outq_bytes() < OUTQ_HIGH) {
    ssize_t r = read(s->fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (char *p = buf; p < buf + r;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      const char *rel = rel_of(W(s), ev->wd);
      if (!rel) continue;
      const char *name = ev->len ? ev->name : "";
      if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        send_change(s, rel, name, "create");
        if ((ev->mask & IN_ISDIR) && W(s)->recursive) {
          char child[PATH_MAX];
          if (snprintf(child, sizeof child, "%s%s%s", rel, *rel ? "/" : "", name) < (int)sizeof child) add_tree(s, child);
        }
      }
      if (ev->mask & IN_MODIFY) send_change(s, rel, name, "write");
      if (ev->mask & IN_DELETE) send_change(s, rel, name, "remove");
      if (ev->mask & IN_MOVED_FROM) send_change(s, rel, name, "rename");
      if (ev->mask & IN_ATTRIB) send_change(s, rel, name, "chmod");
    }
  }
  /* With the host's queue full, stop reading until it drains (main loop re-arms by tick). */
  if (outq_bytes() >= OUTQ_HIGH) {
    unwatch_fd(s->fd);
    W(s)->paused = 1;
  }
}

void watch_tick(sess *s) {
  if (s->closing) {
    jbuf b;
    jb_init(&b);
    jb_cstr(&b, "{\"ok\":true,\"closed\":true}");
    send_json(s->id, K_RES, &b);
    jb_free(&b);
    sess_free(s);
    return;
  }
  if (W(s)->paused && outq_bytes() < OUTQ_HIGH) {
    W(s)->paused = 0;
    watch_fd(s->fd, EPOLLIN, s);
  }
}

static void watch_free(sess *s) {
  struct watches *w = W(s);
  if (!w) return;
  for (int i = 0; i < w->n; i++) free(w->rel[i]);
  free(w->rel);
  free(w->wds);
  free(w->root);
  free(w);
  s->watch = NULL;
}
