/* The metrics operation: what the guest reports of itself (CPU ticks, load, memory, root
 * filesystem, processes, uptime, network and disk bytes), read from /proc at each call. */
#define _GNU_SOURCE
#include "agent.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

/* Reads up to sz-1 bytes (a /proc file comes a page per read), NUL-terminated; returns the length. */
static size_t read_file(const char *path, char *buf, size_t sz) {
  size_t len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n;
    while (len < sz - 1 && (n = read(fd, buf + len, sz - 1 - len)) > 0) len += (size_t)n;
    close(fd);
  }
  buf[len] = 0;
  return len;
}

static uint64_t meminfo(const char *text, const char *key) {
  const char *p = strstr(text, key);
  return p ? strtoull(p + strlen(key), NULL, 10) * 1024 : 0;
}

void op_metrics(uint32_t id, const jdoc *d) {
  (void)d;
  static char buf[8192];
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"cpu\":{");
  read_file("/proc/stat", buf, sizeof buf);
  unsigned long long v[8] = {0};
  sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  const char *names[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};
  for (int i = 0; i < 8; i++) {
    if (i) jb_cstr(&b, ",");
    jb_key(&b, names[i]);
    jb_uint(&b, v[i]);
  }
  jb_cstr(&b, ",\"count\":");
  jb_int(&b, sysconf(_SC_NPROCESSORS_ONLN));
  jb_cstr(&b, ",\"ticks_per_second\":");
  jb_int(&b, sysconf(_SC_CLK_TCK));
  read_file("/proc/loadavg", buf, sizeof buf);
  double l1 = 0, l5 = 0, l15 = 0;
  sscanf(buf, "%lf %lf %lf", &l1, &l5, &l15);
  jb_cstr(&b, ",\"load\":[");
  jb_double(&b, l1); jb_cstr(&b, ","); jb_double(&b, l5); jb_cstr(&b, ","); jb_double(&b, l15);
  jb_cstr(&b, "]},\"memory\":{");
  read_file("/proc/meminfo", buf, sizeof buf);
  jb_cstr(&b, "\"total\":"); jb_uint(&b, meminfo(buf, "MemTotal:"));
  jb_cstr(&b, ",\"free\":"); jb_uint(&b, meminfo(buf, "MemFree:"));
  jb_cstr(&b, ",\"available\":"); jb_uint(&b, meminfo(buf, "MemAvailable:"));
  jb_cstr(&b, "},\"disk\":{");
  struct statvfs sv;
  if (statvfs("/", &sv) == 0) {
    jb_cstr(&b, "\"total\":"); jb_uint(&b, (uint64_t)sv.f_blocks * sv.f_frsize);
    jb_cstr(&b, ",\"free\":"); jb_uint(&b, (uint64_t)sv.f_bavail * sv.f_frsize);
    jb_cstr(&b, ",\"used\":"); jb_uint(&b, (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize);
  }
  int procs = 0;
  DIR *dir = opendir("/proc");
  struct dirent *e;
  while (dir && (e = readdir(dir)))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') procs++;
  if (dir) closedir(dir);
  struct sysinfo si;
  sysinfo(&si);
  jb_cstr(&b, "},\"processes\":");
  jb_int(&b, procs);
  jb_cstr(&b, ",\"uptime_s\":");
  jb_int(&b, si.uptime);
  /* Bytes through every interface but loopback, and read and written on whole virtio disks. */
  unsigned long long rx = 0, tx = 0, rd = 0, wr = 0;
  if (read_file("/proc/net/dev", buf, sizeof buf) > 0) {
    for (char *line = strchr(buf, '\n'); line && (line = strchr(line + 1, '\n'));) {
      char name[32];
      unsigned long long r, t, skip;
      if (sscanf(line + 1, " %31[^:]: %llu %llu %llu %llu %llu %llu %llu %llu %llu", name, &r, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &t) == 10 &&
          strcmp(name, "lo")) {
        rx += r;
        tx += t;
      }
    }
  }
  if (read_file("/proc/diskstats", buf, sizeof buf) > 0) {
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
      char name[32];
      unsigned long long rs, ws, skip;
      if (sscanf(line, " %*u %*u %31s %llu %llu %llu %llu %llu %llu %llu", name, &skip, &skip, &rs, &skip, &skip, &skip, &ws) == 8 &&
          !strncmp(name, "vd", 2) && !isdigit((unsigned char)name[strlen(name) - 1])) {
        rd += rs * 512;
        wr += ws * 512;
      }
    }
  }
  jb_cstr(&b, ",\"net\":{\"rx_bytes\":"); jb_uint(&b, rx);
  jb_cstr(&b, ",\"tx_bytes\":"); jb_uint(&b, tx);
  jb_cstr(&b, "},\"io\":{\"read_bytes\":"); jb_uint(&b, rd);
  jb_cstr(&b, ",\"write_bytes\":"); jb_uint(&b, wr);
  jb_cstr(&b, "}}");
  send_json(id, K_RES, &b);
  jb_free(&b);
}
