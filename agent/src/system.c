/* Guest bring-up as PID 1 (mounts, modules, root switch, hostname, disk growth) and the
 * system-level operations: configure (identity, clock, entropy), shutdown. metrics.c reports. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define CLOCK_SLACK_MS 100 /* a guest clock this close to the host's is not stepped */
/* Images and volumes are made with mkfs.ext4's lazy inode tables; mounted writable, ext4 then
 * zeroes them in the background (ext4lazyinit), in every VM and again in every restored copy,
 * since a base's disk never records the work done: minutes of an idle guest's CPU and writes
 * into its overlay, for nothing but a faster fsck. The kernel's own option for a disk that is
 * used and thrown away turns it off. */
#define EXT4_OPTS "noinit_itable"

/* Kernel ABI constants, spelled out so the agent builds without kernel headers. */
#define RNDADDENTROPY 0x40085203
#define RNDRESEEDCRNG 0x5207
#ifndef BLKGETSIZE64
#define BLKGETSIZE64 0x80081272
#endif
#define EXT4_IOC_RESIZE_FS 0x40086610

int shutdown_requested = 0;
int host_fd_mode = 0;

static void load_modules(void) {
  FILE *f = fopen("/modules.order", "re");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!*line) continue;
    char path[512];
    snprintf(path, sizeof path, "/lib/modules/%s", line);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { alog("module %s missing", line); continue; }
    if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST) alog("module %s: %s", line, strerror(errno));
    close(fd);
  }
  fclose(f);
}

static int wait_for(const char *path, int ms) {
  for (int i = 0; i < ms; i += 5) {
    if (access(path, F_OK) == 0) return 0;
    usleep(5000);
  }
  return -1;
}

/* Grow the root filesystem to fill its disk: the overlay may be larger than the image. */
static void grow_root(const char *dev) {
  int bd = open(dev, O_RDONLY | O_CLOEXEC);
  uint64_t bytes = 0;
  if (bd < 0 || ioctl(bd, BLKGETSIZE64, &bytes) < 0) { if (bd >= 0) close(bd); return; }
  close(bd);
  struct statvfs sv;
  if (statvfs("/", &sv) < 0 || !sv.f_frsize) return;
  uint64_t blocks = bytes / sv.f_frsize;
  if (blocks <= sv.f_blocks + 1024) return; /* already (nearly) full size: nothing to do */
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  if (ioctl(fd, EXT4_IOC_RESIZE_FS, &blocks) < 0) alog("cannot grow root filesystem: %s", strerror(errno));
  close(fd);
}

static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
}

/* The first network interface that is not loopback, or -1. */
static int first_nic(char *name, size_t n) {
  DIR *d = opendir("/sys/class/net");
  struct dirent *e;
  int found = -1;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "lo") || strlen(e->d_name) >= n) continue;
    memcpy(name, e->d_name, strlen(e->d_name) + 1);
    found = 0;
    break;
  }
  if (d) closedir(d);
  return found;
}

static int set_ipv4(int s, const char *ifname, unsigned long req, const char *addr) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  struct sockaddr_in *sa = (struct sockaddr_in *)&ifr.ifr_addr;
  sa->sin_family = AF_INET;
  if (inet_pton(AF_INET, addr, &sa->sin_addr) != 1) { errno = EINVAL; return -1; }
  return ioctl(s, req, &ifr);
}

/* Configures the guest's network device (network "full"): address, netmask, up, default route
 * and resolver. Idempotent, so a restored guest can be configured again. */
static int configure_nic(const char *addr, const char *mask, const char *gw, const char *dns) {
  char ifname[IFNAMSIZ];
  if (first_nic(ifname, sizeof ifname) < 0) { errno = ENODEV; return -1; }
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int rc = -1;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
  if (set_ipv4(s, ifname, SIOCSIFADDR, addr) < 0 || set_ipv4(s, ifname, SIOCSIFNETMASK, mask) < 0) goto out;
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) goto out;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) goto out;
  struct rtentry rt;
  memset(&rt, 0, sizeof rt);
  struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gwa = (struct sockaddr_in *)&rt.rt_gateway, *msk = (struct sockaddr_in *)&rt.rt_genmask;
  dst->sin_family = gwa->sin_family = msk->sin_family = AF_INET;
  if (inet_pton(AF_INET, gw, &gwa->sin_addr) != 1) { errno = EINVAL; goto out; }
  rt.rt_flags = RTF_UP | RTF_GATEWAY;
  rt.rt_dev = ifname;
  if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST) goto out;
  int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd >= 0) { dprintf(fd, "nameserver %s\n", dns); close(fd); }
  rc = 0;
out:
  { int e = errno; close(s); errno = e; }
  return rc;
}

/* Every exec'd process (and all it starts) lives in one cgroup with a pids and a memory limit
 * and one CPU share (however many processes it has, the agent competes with it as an equal),
 * while the agent stays outside it: a fork bomb or a memory hog exhausts the sandbox's share,
 * never the agent's, so the host can still talk to the guest and kill it. */
static void sandbox_cgroup_init(void) {
  /* favordynmods (Linux 6.0+): every exec moves its first process into a cgroup of its own, and
   * without it each move waits for an RCU grace period (the lock a move takes is one whose writers
   * wait for one; the option keeps it on its slow path, which costs forks and exits a little
   * instead). Under TCG a grace period is long: an exec of `true` took 37 ms without the option
   * against 28 ms with it; under KVM the gain is smaller. An older kernel refuses the option, and
   * gets the mount without it. */
  mkdir("/sys/fs/cgroup", 0755);
  if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "favordynmods") < 0 && errno != EBUSY)
    mount_fs("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  if (write_str("/sys/fs/cgroup/cgroup.subtree_control", "+pids +memory +cpu") < 0) alog("cgroup controllers: %s", strerror(errno));
  if (mkdir(sandbox_cgroup, 0755) < 0 && errno != EEXIST) alog("cgroup %s: %s", sandbox_cgroup, strerror(errno));
}

/* Sets the sandbox cgroup's limits: at most pids_max tasks, and all of memory but reserve_mb. */
static int set_limits(int64_t pids_max, int64_t reserve_mb) {
  char v[32], file[200];
  if (pids_max > 0) {
    snprintf(v, sizeof v, "%lld", (long long)pids_max);
    if (write_str(sandbox_file(file, sizeof file, "pids.max"), v) < 0) return -1;
  }
  if (reserve_mb > 0) {
    struct sysinfo si;
    if (sysinfo(&si) < 0) return -1;
    uint64_t total = (uint64_t)si.totalram * si.mem_unit, reserve = (uint64_t)reserve_mb << 20;
    if (total > 2 * reserve) {
      snprintf(v, sizeof v, "%llu", (unsigned long long)(total - reserve));
      if (write_str(sandbox_file(file, sizeof file, "memory.max"), v) < 0) return -1;
    }
  }
  return 0;
}

void boot_init(void) {
  mount_fs("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  mount_fs("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  mount_fs("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  read_cmdline();
  load_modules();

  char root[64], val[256];
  if (cmdline_get("fvm.root", root, sizeof root)) {
    char dev[80];
    snprintf(dev, sizeof dev, "/dev/%s", root);
    if (wait_for(dev, 10000) < 0) alog("root disk %s did not appear", dev);
    int ro = cmdline_get("fvm.ro", val, sizeof val) && val[0] == '1';
    mkdir("/newroot", 0755);
    if (mount(dev, "/newroot", "ext4", ro ? MS_RDONLY : 0, EXT4_OPTS) < 0) {
      /* A VM without its root filesystem is useless: stop, so the host reports a boot error
       * with this line in the console tail instead of a VM that half works. */
      alog("cannot mount root filesystem %s: %s", dev, strerror(errno));
      power_off();
    } else {
      /* switch_root: the initramfs cannot be pivoted away, so move the new root over "/" */
      mkdir("/newroot/dev", 0755);
      mkdir("/newroot/proc", 0555);
      mkdir("/newroot/sys", 0555);
      mount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL);
      mount("/proc", "/newroot/proc", NULL, MS_MOVE, NULL);
      mount("/sys", "/newroot/sys", NULL, MS_MOVE, NULL);
      if (chdir("/newroot") == 0 && mount(".", "/", NULL, MS_MOVE, NULL) == 0 && chroot(".") == 0) {
        if (chdir("/") < 0) {}
        if (!ro) grow_root(dev);
        /* A system image: systemd becomes PID 1 and runs this agent as its first service. */
        if (cmdline_get("fvm.init", val, sizeof val) && !strcmp(val, "systemd")) systemd_handover();
      } else {
        alog("switching root failed: %s", strerror(errno));
      }
    }
  }
  mount_fs("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666");
  mount_fs("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
  mount_fs("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  if (access("/dev/ptmx", F_OK) < 0) symlink("pts/ptmx", "/dev/ptmx");
  if (cmdline_get("fvm.hostname", val, sizeof val)) set_hostname(val);
  loopback_up();
  sandbox_cgroup_init();
}

static int hexnib(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* journald keeps writing into the directory named for the machine ID it read at boot (the base
 * snapshot's, or a parent's), while journalctl reads the one named for the current ID: without a
 * link from the new name to where the journal is, a restored or forked sandbox's journal reads as
 * empty. Both places journald may keep it: on disk, or in /run when there is no disk journal. */
static void link_journal(const char *old_id, const char *new_id) {
  static const char *const dirs[] = {"/var/log/journal", "/run/log/journal"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    char from[96], to[96], real[PATH_MAX];
    snprintf(from, sizeof from, "%s/%s", dirs[i], old_id);
    snprintf(to, sizeof to, "%s/%s", dirs[i], new_id);
    size_t n = strlen(dirs[i]);
    if (!realpath(from, real) || strncmp(real, dirs[i], n) || real[n] != '/') continue;
    if (symlink(real, to) < 0 && errno == EEXIST) {
      unlink(to);
      if (symlink(real, to) < 0) {}
    }
  }
}

/* Identity and host-provided state: hostname, wall clock, entropy. Run at boot and after a
 * restore, so that clones never share random state or a stale clock. */
void op_configure(uint32_t id, const jdoc *d) {
  char *host = req_str(d, "hostname");
  if (host) {
    int bad = set_hostname(host) < 0;
    free(host);
    if (bad) { send_error(id, "EINVAL", "\"hostname\" must be 1..63 characters"); return; }
  }
  int64_t t;
  if (req_int(d, "time_ms", -1, &t) == 0 && t > 0) {
    /* The host sends its clock at every start and restore, and now and then while the guest runs
     * (core/sandboxes/clock.ts). Within CLOCK_SLACK_MS the guest is left alone: the difference is
     * the message's own delay, and stepping for it would only make the clock jitter. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t off = t - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    if (off >= CLOCK_SLACK_MS || off <= -CLOCK_SLACK_MS) {
      struct timespec ts = {.tv_sec = t / 1000, .tv_nsec = (t % 1000) * 1000000};
      clock_settime(CLOCK_REALTIME, &ts);
    }
  }
  char *seed = req_str(d, "seed_hex");
  if (seed) {
    size_t n = strlen(seed) / 2;
    if (n > 512) n = 512;
    struct { int count, size; unsigned char buf[512]; } ent;
    for (size_t i = 0; i < n; i++) {
      int hi = hexnib(seed[2 * i]), lo = hexnib(seed[2 * i + 1]);
      if (hi < 0 || lo < 0) { send_error(id, "EINVAL", "\"seed_hex\" must be hexadecimal"); free(seed); return; }
      ent.buf[i] = (unsigned char)(hi << 4 | lo);
    }
    ent.count = (int)n * 8;
    ent.size = (int)n;
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, RNDADDENTROPY, &ent) < 0) {
      /* without CAP_SYS_ADMIN semantics (not PID 1 in tests) fall back to mixing in uncredited */
      if (fd >= 0 && write(fd, ent.buf, n) < 0) {}
    }
    /* Forked guests share the CRNG state they were saved with; new input alone would only be
     * used at the next scheduled reseed, so force one now. */
    if (fd >= 0) {
      ioctl(fd, RNDRESEEDCRNG);
      close(fd);
    }
    free(seed);
  }
  int nt = json_get(d, 0, "net");
  if (nt >= 0 && d->toks[nt].type == J_OBJ) {
    char *addr = json_strdup(d, json_get(d, nt, "addr"), NULL), *mask = json_strdup(d, json_get(d, nt, "netmask"), NULL);
    char *gw = json_strdup(d, json_get(d, nt, "gateway"), NULL), *dns = json_strdup(d, json_get(d, nt, "dns"), NULL);
    int bad = !addr || !mask || !gw || !dns;
    int rc = bad ? -1 : configure_nic(addr, mask, gw, dns);
    int err = bad ? EINVAL : errno;
    free(addr); free(mask); free(gw); free(dns);
    if (rc < 0) { send_errno(id, err, "configuring the network device (\"net\" needs addr, netmask, gateway, dns)"); return; }
  }
  int64_t pids_max, reserve_mb;
  req_int(d, "pids_max", 0, &pids_max);
  req_int(d, "memory_reserve_mb", 0, &reserve_mb);
  if ((pids_max > 0 || reserve_mb > 0) && set_limits(pids_max, reserve_mb) < 0) {
    send_errno(id, errno, "setting the sandbox cgroup limits");
    return;
  }
  char *mid = req_str(d, "machine_id");
  if (mid) {
    int ok = strlen(mid) == 32;
    for (int i = 0; ok && i < 32; i++) ok = hexnib(mid[i]) >= 0;
    if (!ok) { free(mid); send_error(id, "EINVAL", "\"machine_id\" must be 32 hexadecimal digits"); return; }
    char old_id[40] = "";
    read_small("/etc/machine-id", old_id, sizeof old_id);
    old_id[strcspn(old_id, "\n")] = 0;
    int fd = open("/etc/machine-id", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
    if (fd >= 0) {
      mid[32] = 0;
      if (write(fd, mid, 32) < 0 || write(fd, "\n", 1) < 0) {}
      close(fd);
    }
    if (strlen(old_id) == 32 && strcmp(old_id, mid)) link_journal(old_id, mid);
    free(mid);
  }
  send_ok(id);
}

void op_shutdown(uint32_t id, const jdoc *d) {
  (void)d;
  sync();
  send_ok(id);
  /* main.c powers off once the reply has been written to the host */
  if (getpid() == 1 || host_fd_mode || service_mode) shutdown_requested = 1;
}

void power_off(void) {
  if (host_fd_mode) _exit(0); /* not a VM: the namespaces end with this process */
  sync();
  usleep(50000); /* let QEMU hand the last reply to the host socket */
  reboot(RB_POWER_OFF);
}

/* Mounts a volume: the virtio disk whose serial is "serial" (its ext4 filesystem) at "path",
 * read-only when asked. Mounting what is already mounted there is not an error, so a restored or
 * re-attached guest can be told again. */
void op_mount(uint32_t id, const jdoc *d) {
  char *serial = req_str(d, "serial");
  char *path = req_str(d, "path");
  int ro = req_bool(d, "readonly", 0);
  char dev[64] = "";
  if (!serial || !*serial || strlen(serial) > 20 || strchr(serial, '/')) { send_error(id, "EINVAL", "\"serial\" (a disk serial) is required"); goto out; }
  if (!path || path[0] != '/' || !path[1]) { send_error(id, "EINVAL", "\"path\" must be an absolute path below /"); goto out; }
  DIR *blocks = opendir("/sys/block");
  struct dirent *e;
  while (blocks && (e = readdir(blocks))) {
    if (strncmp(e->d_name, "vd", 2) || strlen(e->d_name) > 16) continue;
    char file[96], got[32] = "";
    snprintf(file, sizeof file, "/sys/block/%s/serial", e->d_name);
    if (read_small(file, got, sizeof got) <= 0) continue;
    got[strcspn(got, "\n")] = 0;
    if (!strcmp(got, serial)) { snprintf(dev, sizeof dev, "/dev/%s", e->d_name); break; }
  }
  if (blocks) closedir(blocks);
  if (!*dev) { send_error(id, "ENOENT", "no disk with serial %s", serial); goto out; }
  if (mkdir_parents(path, 0755) < 0) { send_errno(id, errno, path); goto out; }
  if (mount(dev, path, "ext4", ro ? MS_RDONLY : 0, EXT4_OPTS) < 0) {
    int err = errno;
    struct stat a, b;
    /* EBUSY: mounted already; the same device at the same place is fine. */
    if (err == EBUSY && !stat(path, &a) && !stat(dev, &b) && a.st_dev == b.st_rdev) { send_ok(id); goto out; }
    send_errno(id, err, path);
    goto out;
  }
  send_ok(id);
out:
  free(serial);
  free(path);
}
