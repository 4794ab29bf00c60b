/* Past 400 lines because each file op is a short handler sharing the same path and credit helpers.
 * File operations. Writes are atomic (temp file + rename in the target directory); reads are
 * streamed under the host's credit so that a large file never sits whole in memory. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <signal.h>

#define MAX_LIST 10000

static char *need_path(uint32_t id, const jdoc *d, const char *key) {
  char *p = req_str(d, key);
  if (!p || !*p) { send_error(id, "EINVAL", "\"%s\" (a path) is required", key); free(p); return NULL; }
  if (p[0] != '/') { send_error(id, "EINVAL", "\"%s\" must be an absolute path, got \"%.200s\"", key, p); free(p); return NULL; }
  return p;
}

int mkdir_parents(const char *path, mode_t mode) { return mkdir_owned(path, mode, -1, -1); }

/* mkdir -p, each directory it makes given to uid:gid (-1: left as made), as E2B's envd makes a
 * user's directories as root and then hands them over. */
int mkdir_owned(const char *path, mode_t mode, int64_t uid, int64_t gid) {
  char *tmp = strdup(path);
  if (!tmp) return -1;
  for (char *p = tmp + 1;; p++) {
    if (*p && *p != '/') continue;
    char c = *p;
    *p = 0;
    if (mkdir(tmp, mode) == 0) {
      if ((uid >= 0 || gid >= 0) && chown(tmp, (uid_t)uid, (gid_t)gid) < 0) { free(tmp); return -1; }
    } else if (errno != EEXIST) {
      free(tmp);
      return -1;
    }
    if (!c) break;
    *p = c;
  }
  free(tmp);
  return 0;
}

static const char *type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISCHR(m)) return "chardev";
  if (S_ISBLK(m)) return "blockdev";
  return "other";
}

static void stat_json(jbuf *b, const struct stat *st) {
  jb_cstr(b, "\"type\":\"");
  jb_cstr(b, type_name(st->st_mode));
  jb_cstr(b, "\",\"size\":");
  jb_int(b, st->st_size);
  jb_cstr(b, ",\"mode\":");
  jb_int(b, st->st_mode & 07777);
  jb_cstr(b, ",\"uid\":");
  jb_int(b, st->st_uid);
  jb_cstr(b, ",\"gid\":");
  jb_int(b, st->st_gid);
  jb_cstr(b, ",\"mtime_ms\":");
  jb_int(b, (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000);
  /* What a commit compares against its image: an inode whose number and change time are the
   * image's own is unchanged (the kernel sets ctime on every change, and no call can set it back). */
  char ct[48];
  snprintf(ct, sizeof ct, "%lld.%09ld", (long long)st->st_ctim.tv_sec, (long)st->st_ctim.tv_nsec);
  jb_cstr(b, ",\"ino\":");
  jb_uint(b, (uint64_t)st->st_ino);
  jb_cstr(b, ",\"nlink\":");
  jb_uint(b, (uint64_t)st->st_nlink);
  jb_cstr(b, ",\"dev\":");
  jb_uint(b, (uint64_t)st->st_dev);
  jb_cstr(b, ",\"ctime\":\"");
  jb_cstr(b, ct);
  jb_cstr(b, "\"");
  if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
    jb_cstr(b, ",\"rdev_major\":");
    jb_uint(b, major(st->st_rdev));
    jb_cstr(b, ",\"rdev_minor\":");
    jb_uint(b, minor(st->st_rdev));
  }
}

/* Ends a read or write stream: reply with the byte count and drop the session. */
static void finish_transfer(sess *s) {
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"size\":");
  jb_uint(&b, s->done);
  jb_cstr(&b, "}");
  send_json(s->id, K_RES, &b);
  jb_free(&b);
  sess_free(s);
}

/* ---- write ---- */
void op_write(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  int64_t mode, uid, gid;
  req_int(d, "mode", 0644, &mode);
  req_int(d, "uid", -1, &uid);
  req_int(d, "gid", -1, &gid);
  int parents = req_bool(d, "parents", 1);
  char *dcopy = strdup(path), *bcopy = strdup(path);
  char *dir = dirname(dcopy), *base = basename(bcopy);
  char *tmp = NULL;
  int fd = -1;
  struct stat st;
  if (!stat(path, &st) && S_ISDIR(st.st_mode)) { send_errno(id, EISDIR, path); goto fail; }
  if (parents && mkdir_owned(dir, 0755, uid, gid) < 0) { send_errno(id, errno, dir); goto fail; }
  if (asprintf(&tmp, "%s/.%.200s.fvm-%u.tmp", dir, base, id) < 0) { tmp = NULL; send_errno(id, ENOMEM, path); goto fail; }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) { send_errno(id, errno, path); goto fail; }
  sess *s = sess_new(id, S_WRITE);
  if (!s) { send_errno(id, ENOMEM, path); goto fail; }
  if (uid >= 0 || gid >= 0) {
    if (fchown(fd, (uid_t)uid, (gid_t)gid) < 0) { sess_free(s); send_errno(id, errno, "chown"); goto fail; }
  }
  s->fd = fd;
  s->tmp_path = tmp;
  s->final_path = path;
  s->mode = (int)(mode & 07777);
  free(dcopy);
  free(bcopy);
  return;
fail:
  if (fd >= 0) { close(fd); unlink(tmp); }
  free(tmp);
  free(path);
  free(dcopy);
  free(bcopy);
}

void write_on_data(sess *s, const uint8_t *p, size_t n, int eof) {
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(s->fd, p + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) { send_errno(s->id, errno, s->final_path); sess_free(s); return; }
    off += (size_t)w;
  }
  s->done += n;
  if (n) send_window(s->id, CH_IN, (uint32_t)n);
  if (!eof) return;
  if (s->as_uid >= 0) {
    setfsgid((gid_t)s->as_gid);
    setfsuid((uid_t)s->as_uid);
  }
  int bad = fchmod(s->fd, (mode_t)s->mode) < 0 || rename(s->tmp_path, s->final_path) < 0;
  int err = errno;
  if (s->as_uid >= 0) {
    setfsuid(0);
    setfsgid(0);
  }
  if (bad) {
    send_errno(s->id, err, s->final_path);
    sess_free(s);
    return;
  }
  free(s->tmp_path);
  s->tmp_path = NULL; /* renamed: nothing to clean up */
  finish_transfer(s);
}

/* ---- read ---- */
void op_read(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  int64_t offset, length;
  req_int(d, "offset", 0, &offset);
  req_int(d, "length", -1, &length);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) { send_errno(id, errno, path); free(path); return; }
  if (fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) {
    send_errno(id, S_ISDIR(st.st_mode) ? EISDIR : errno, path);
    close(fd);
    free(path);
    return;
  }
  free(path);
  if (offset > 0 && lseek(fd, offset, SEEK_SET) < 0) { send_errno(id, errno, "seek"); close(fd); return; }
  sess *s = sess_new(id, S_READ);
  if (!s) { close(fd); send_errno(id, ENOMEM, "read"); return; }
  s->fd = fd;
  s->remaining = length;
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"event\":\"stat\",");
  stat_json(&b, &st);
  jb_cstr(&b, "}");
  send_json(id, K_EVENT, &b);
  jb_free(&b);
}

int read_pump(sess *s) {
  static char buf[DATA_CHUNK];
  /* One chunk per loop turn, so that other streams and requests interleave fairly. */
  if (s->credit[CH_OUT] <= 0 || outq_bytes() >= OUTQ_HIGH) return 0;
  size_t want = s->credit[CH_OUT] < DATA_CHUNK ? (size_t)s->credit[CH_OUT] : DATA_CHUNK;
  if (s->remaining >= 0 && (int64_t)want > s->remaining) want = (size_t)s->remaining;
  ssize_t r = want ? read(s->fd, buf, want) : 0;
  if (r < 0) { send_errno(s->id, errno, "read"); sess_free(s); return 0; }
  if (r > 0) {
    send_frame(s->id, K_DATA, CH_OUT, 0, buf, (size_t)r);
    s->credit[CH_OUT] -= r;
    s->done += (uint64_t)r;
    if (s->remaining > 0) s->remaining -= r;
    return 1;
  }
  send_frame(s->id, K_DATA, CH_OUT, F_EOF, NULL, 0);
  finish_transfer(s);
  return 0;
}

/* ---- metadata operations ---- */
void op_stat(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  struct stat st;
  if (lstat(path, &st) < 0) { send_errno(id, errno, path); free(path); return; }
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,");
  stat_json(&b, &st);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlink(path, target, sizeof target);
    if (n > 0) { jb_cstr(&b, ",\"target\":"); jb_str(&b, target, (size_t)n); }
  }
  jb_cstr(&b, "}");
  send_json(id, K_RES, &b);
  jb_free(&b);
  free(path);
}

void op_list(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  DIR *dir = opendir(path);
  if (!dir) { send_errno(id, errno, path); free(path); return; }
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"entries\":[");
  int64_t skip;
  req_int(d, "offset", 0, &skip); /* entries to pass over: a long listing is read in pages */
  int n = 0, truncated = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (skip > 0) { skip--; continue; }
    if (n >= MAX_LIST || b.len > MAX_PAYLOAD - 8192) { truncated = 1; break; }
    struct stat st;
    if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    if (n++) jb_cstr(&b, ",");
    jb_cstr(&b, "{\"name\":");
    jb_str(&b, e->d_name, strlen(e->d_name));
    jb_cstr(&b, ",");
    stat_json(&b, &st);
    jb_cstr(&b, "}");
  }
  closedir(dir);
  jb_cstr(&b, truncated ? "],\"truncated\":true}" : "],\"truncated\":false}");
  send_json(id, K_RES, &b);
  jb_free(&b);
  free(path);
}

void op_mkdir(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  int64_t mode, uid, gid;
  req_int(d, "mode", 0755, &mode);
  req_int(d, "uid", -1, &uid);
  req_int(d, "gid", -1, &gid);
  int r;
  if (req_bool(d, "parents", 1)) r = mkdir_owned(path, (mode_t)mode, uid, gid);
  else if ((r = mkdir(path, (mode_t)mode)) == 0 && (uid >= 0 || gid >= 0)) r = chown(path, (uid_t)uid, (gid_t)gid);
  if (r < 0) send_errno(id, errno, path); else send_ok(id);
  free(path);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st; (void)f;
  return flag == FTW_DP ? rmdir(p) : unlink(p);
}

void op_remove(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  if (!strcmp(path, "/")) { send_error(id, "EINVAL", "refusing to remove /"); free(path); return; }
  struct stat st;
  int r;
  if (lstat(path, &st) < 0) r = -1;
  else if (!S_ISDIR(st.st_mode)) r = unlink(path);
  else if (req_bool(d, "recursive", 0)) r = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
  else r = rmdir(path);
  if (r < 0) send_errno(id, errno, path); else send_ok(id);
  free(path);
}

/* musl has no renameat2 wrapper; RENAME_NOREPLACE is 1 */
static int rename2(const char *from, const char *to, int overwrite) {
  return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, overwrite ? 0 : 1);
}

/* rename(2) cannot cross filesystems: a regular file is copied (contents, mode, owner) to a
 * temporary file beside the target, renamed into place, and the source unlinked, as mv does.
 * Anything else fails with EXDEV. */
static int move_across(const char *from, const char *to, int overwrite) {
  struct stat st;
  if (lstat(from, &st) < 0) return -1;
  if (!S_ISREG(st.st_mode)) { errno = EXDEV; return -1; }
  int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return -1;
  char *tmp = malloc(strlen(to) + 32);
  char *dir = strdup(to);
  if (!tmp || !dir) { close(in); free(tmp); free(dir); errno = ENOMEM; return -1; }
  sprintf(tmp, "%s/.forgevm-mv-XXXXXX", dirname(dir));
  free(dir);
  int out = mkostemp(tmp, O_CLOEXEC);
  if (out < 0) { int e = errno; close(in); free(tmp); errno = e; return -1; }
  char buf[65536];
  ssize_t n = 0;
  int bad = 0;
  while (!bad && (n = read(in, buf, sizeof buf)) > 0) {
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));
      if (w < 0) { bad = 1; break; }
      off += w;
    }
  }
  if (n < 0) bad = 1;
  if (!bad && fchmod(out, st.st_mode & 07777) < 0) bad = 1;
  if (!bad) (void)!fchown(out, st.st_uid, st.st_gid); /* as another user: stays theirs */
  int e = errno;
  close(in);
  if (close(out) < 0 && !bad) { bad = 1; e = errno; }
  if (!bad && rename2(tmp, to, overwrite) < 0) { bad = 1; e = errno; }
  if (bad) { unlink(tmp); free(tmp); errno = e; return -1; }
  free(tmp);
  return unlink(from);
}

void op_move(uint32_t id, const jdoc *d) {
  char *from = need_path(id, d, "from");
  if (!from) return;
  char *to = need_path(id, d, "to");
  if (!to) { free(from); return; }
  int overwrite = req_bool(d, "overwrite", 1);
  int r = rename2(from, to, overwrite);
  if (r < 0 && errno == EXDEV) r = move_across(from, to, overwrite);
  if (r >= 0) send_ok(id);
  else if (errno == EXDEV) send_error(id, "EXDEV", "%s is a directory or special file on another filesystem than %s: only regular files move across filesystems; copy it instead", from, to);
  else send_errno(id, errno, errno == EEXIST ? to : from);
  free(from);
  free(to);
}

void op_chmod(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  int64_t mode;
  if (req_int(d, "mode", -1, &mode) < 0 || mode < 0 || mode > 07777) {
    send_error(id, "EINVAL", "\"mode\" must be an integer between 0 and 07777");
  } else if (chmod(path, (mode_t)mode) < 0) {
    send_errno(id, errno, path);
  } else {
    send_ok(id);
  }
  free(path);
}

/* Writes every filesystem's dirty pages to its disk: a saved disk then holds what the guest wrote. */
void op_sync(uint32_t id, const jdoc *d) {
  (void)d;
  sync();
  send_ok(id);
}

/* Stops every process but this one (kill(-1) spares PID 1) and flushes the filesystems, so a
 * commit reads a disk nothing writes to; "on": false lets them run again. */
void op_freeze(uint32_t id, const jdoc *d) {
  int on = req_bool(d, "on", 1);
  if (kill(-1, on ? SIGSTOP : SIGCONT) < 0 && errno != ESRCH) { send_errno(id, errno, "kill"); return; }
  if (on) sync();
  send_ok(id);
}

/* Creates a symbolic link at "path" pointing to "target" (which is not looked at). */
void op_symlink(uint32_t id, const jdoc *d) {
  char *path = need_path(id, d, "path");
  if (!path) return;
  char *target = req_str(d, "target");
  if (!target || !*target) { send_error(id, "EINVAL", "\"target\" (a string) is required"); free(target); free(path); return; }
  if (symlink(target, path) < 0) send_errno(id, errno, path);
  else send_ok(id);
  free(target);
  free(path);
}

void op_glob(uint32_t id, const jdoc *d) {
  char *pattern = need_path(id, d, "pattern");
  if (!pattern) return;
  glob_t g;
  int r = glob(pattern, 0, NULL, &g);
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"matches\":[");
  int truncated = 0;
  if (r == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      if (i >= MAX_LIST || b.len > MAX_PAYLOAD - 8192) { truncated = 1; break; }
      if (i) jb_cstr(&b, ",");
      jb_str(&b, g.gl_pathv[i], strlen(g.gl_pathv[i]));
    }
  }
  if (r == 0 || r == GLOB_NOMATCH) {
    jb_cstr(&b, truncated ? "],\"truncated\":true}" : "],\"truncated\":false}");
    send_json(id, K_RES, &b);
  } else {
    send_error(id, "EIO", "glob failed for \"%.200s\"", pattern);
  }
  if (r == 0) globfree(&g);
  jb_free(&b);
  free(pattern);
}
