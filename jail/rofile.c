/* Preloaded into a confined QEMU that restores a snapshot whose RAM file many VMs share: QEMU
 * 7.2 opens a memory-backend-file read-write even when it maps it privately (copy-on-write),
 * and its readonly=on would map guest RAM read-only. This turns QEMU's open of that one file
 * ($FORGEVM_RO_FILE) into a read-only open; the private mapping is writable all the same, and
 * the VMM can never write to the file other VMs map.
 *
 * It also answers QEMU's hole punch in that file with success, leaving the file as it is. QEMU
 * 7.2 discards guest RAM (free page reporting) by punching a hole in the backing file and then
 * MADV_DONTNEED on the mapping, even for a private mapping, where the punch would erase the
 * snapshot every other VM reads; on a read-only descriptor it fails instead, and QEMU then skips
 * the madvise too. With the punch answered, only the madvise happens: this VM's copy-on-write
 * copies go, and the pages read as the snapshot's again (later QEMU releases do just that). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

static const char *ro_file;
static struct stat ro_st;
static int ro_known;

__attribute__((constructor)) static void init(void) {
  ro_file = getenv("FORGEVM_RO_FILE");
  ro_known = ro_file && stat(ro_file, &ro_st) == 0;
}

static int is_ro_fd(int fd) {
  struct stat st;
  return ro_known && fstat(fd, &st) == 0 && st.st_dev == ro_st.st_dev && st.st_ino == ro_st.st_ino;
}

#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

int fallocate(int fd, int mode, off_t offset, off_t len) {
  static int (*real)(int, int, off_t, off_t);
  if ((mode & FALLOC_FL_PUNCH_HOLE) && is_ro_fd(fd)) return 0;
  if (!real) real = dlsym(RTLD_NEXT, "fallocate");
  return real(fd, mode, offset, len);
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
  static int (*real)(int, int, off_t, off_t);
  if ((mode & FALLOC_FL_PUNCH_HOLE) && is_ro_fd(fd)) return 0;
  if (!real) real = dlsym(RTLD_NEXT, "fallocate64");
  return real(fd, mode, offset, len);
}

static int fix(const char *path, int flags) {
  if (ro_file && path && !strcmp(path, ro_file)) flags &= ~(O_WRONLY | O_RDWR | O_CREAT | O_TRUNC);
  return flags;
}

#define WRAP(name, ...)                                                         \
  int name(__VA_ARGS__, int flags, ...) {                                       \
    static int (*real)();                                                       \
    if (!real) real = dlsym(RTLD_NEXT, #name);                                  \
    va_list ap;                                                                 \
    va_start(ap, flags);                                                        \
    int mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;           \
    va_end(ap);                                                                 \
    return CALL_##name(fix(path, flags), mode);                                 \
  }

#define CALL_open(f, m) real(path, f, m)
#define CALL_open64(f, m) real(path, f, m)
#define CALL_openat(f, m) real(dirfd, path, f, m)
#define CALL_openat64(f, m) real(dirfd, path, f, m)
WRAP(open, const char *path)
WRAP(open64, const char *path)
WRAP(openat, int dirfd, const char *path)
WRAP(openat64, int dirfd, const char *path)

/* _FORTIFY_SOURCE builds call these when the flags are not a compile-time constant */
int __open_2(const char *path, int flags) {
  static int (*real)(const char *, int);
  if (!real) real = dlsym(RTLD_NEXT, "__open_2");
  return real(path, fix(path, flags));
}
int __open64_2(const char *path, int flags) {
  static int (*real)(const char *, int);
  if (!real) real = dlsym(RTLD_NEXT, "__open64_2");
  return real(path, fix(path, flags));
}
