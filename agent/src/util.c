/* Small helpers every part of the agent uses: its log, small /proc and /sys reads, the clock, and
 * the kernel command line, mounts and small writes that bring-up and systemd.c share. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void alog(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  dprintf(2, "forgevm-agent: %.*s", n, buf);
}

ssize_t read_small(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return n;
}

uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char cmdline[4096];

void read_cmdline(void) {
  int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
    if (n > 0) cmdline[n] = 0;
    close(fd);
  }
}

/* Value of fvm.KEY=... on the kernel command line, or NULL. */
const char *cmdline_get(const char *key, char *out, size_t outsz) {
  size_t kl = strlen(key);
  for (char *p = cmdline; (p = strstr(p, key)); p += kl) {
    if ((p == cmdline || p[-1] == ' ') && p[kl] == '=') {
      const char *v = p + kl + 1;
      size_t n = strcspn(v, " \n");
      if (n >= outsz) n = outsz - 1;
      memcpy(out, v, n);
      out[n] = 0;
      return out;
    }
  }
  return NULL;
}

void mount_fs(const char *src, const char *dst, const char *type, unsigned long fl, const char *opt) {
  mkdir(dst, 0755);
  if (mount(src, dst, type, fl, opt) < 0 && errno != EBUSY) alog("mount %s on %s: %s", type, dst, strerror(errno));
}

int write_str(const char *path, const char *v) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, v, strlen(v));
  close(fd);
  return n < 0 ? -1 : 0;
}

/* The kernel's hostname and /etc/hostname agree, so tools reading either see the same name. */
int set_hostname(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 63 || sethostname(name, n) < 0) return -1;
  int fd = open("/etc/hostname", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) { dprintf(fd, "%s\n", name); close(fd); }
  return 0;
}
