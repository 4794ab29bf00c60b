/* Giving idle memory back to the host. The guest drops its clean page cache and compacts its
 * free memory; the balloon's free page reporting then tells the host about blocks that stay
 * free, and the host discards them. Nothing a process holds is touched: a file read again after
 * a drop comes from the disk. While idle, free pages are reported one by one (order 0) instead
 * of in whole 2 MiB blocks, which gives back about twice as much here; the next exec puts the
 * kernel's order back, so that a working guest is not made to refault every page it frees.
 * Feature "reclaim". */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static int write_proc(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, value, strlen(value));
  int err = errno;
  close(fd);
  errno = err;
  return n < 0 ? -1 : 0;
}

#define REPORTING_ORDER "/sys/module/page_reporting/parameters/page_reporting_order"

static char saved_order[16]; /* the kernel's order while reporting is lowered, else empty */

void reclaim_end(void) {
  if (!saved_order[0]) return;
  (void)write_proc(REPORTING_ORDER, saved_order);
  saved_order[0] = 0;
}

void op_reclaim(uint32_t id, const jdoc *d) {
  if (!saved_order[0]) {
    int fd = open(REPORTING_ORDER, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, saved_order, sizeof saved_order - 1) : -1;
    if (fd >= 0) close(fd);
    saved_order[n > 0 ? n : 0] = 0;
    if (saved_order[0] && write_proc(REPORTING_ORDER, "0") < 0) saved_order[0] = 0;
  }
  if (req_bool(d, "drop_caches", 1) && write_proc("/proc/sys/vm/drop_caches", "1") < 0) {
    send_errno(id, errno, "drop_caches");
    return;
  }
  /* Without compaction the free pages stay scattered, and only whole blocks are reported. A
   * kernel without CONFIG_COMPACTION has no such file: then nothing is compacted. */
  if (req_bool(d, "compact", 1)) (void)write_proc("/proc/sys/vm/compact_memory", "1");
  struct sysinfo si;
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"free_kib\":");
  jb_uint(&b, sysinfo(&si) == 0 ? (uint64_t)si.freeram * si.mem_unit / 1024 : 0);
  jb_cstr(&b, "}");
  send_json(id, K_RES, &b);
  jb_free(&b);
}
