/* forgevm-jail: starts one VMM confined. Run as root by the ForgeVM server, it
 *   1. enters private mount, network and IPC namespaces and opens every path the VMM may use (--ro, --rw)
 *      while they are still visible,
 *   2. covers the directories it must not see (--hide:
 *      the server's data directory, home directories, /tmp, …) with empty tmpfs mounts,
 *   3. mounts the opened paths back at their own names (read-only where asked), and a /proc
 *      that shows the VMM only its own processes,
 *   4. joins the VM's cgroups (--cgroup), sets resource limits and niceness, drops to an unprivileged uid/gid with no other groups
 *      than the ones given, forbids privilege gain (no_new_privs),
 *   5. and execs the VMM, which keeps this process's pid.
 * Paths are opened after entering the namespace: a bind source must be one of its own mounts.
 * Any failure before the exec ends with exit code 125 and a message on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_PATHS 256

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "forgevm-jail: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(125);
}

struct bind { const char *path; int fd; int ro; int dir; };
static struct bind binds[MAX_PATHS];
static int nbinds;
static const char *hides[MAX_PATHS];
static int nhides;

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0);
}

/* mkdir -p inside the jail (only ever below a hidden, tmpfs-covered directory) */
static void make_dirs(const char *path) {
  char buf[4096];
  if (strlen(path) >= sizeof buf) die("path too long: %s", path);
  strcpy(buf, path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) die("mkdir %s: %s", buf, strerror(errno));
    *p = '/';
  }
}

static void add_bind(const char *path, int ro) {
  if (nbinds == MAX_PATHS) die("too many paths");
  if (path[0] != '/') die("paths must be absolute: %s", path);
  binds[nbinds++] = (struct bind){path, -1, ro, 0};
}

/* Opened inside the new namespace (a bind source must belong to it), before anything is hidden. */
static void open_binds(void) {
  for (int b = 0; b < nbinds; b++) {
    int fd = open(binds[b].path, O_PATH | O_CLOEXEC);
    if (fd < 0) die("open %s: %s", binds[b].path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) die("stat %s: %s", binds[b].path, strerror(errno));
    binds[b].fd = fd;
    binds[b].dir = S_ISDIR(st.st_mode);
  }
}

static void set_rlimit(const char *spec) {
  static const struct { const char *name; int res; } names[] = {
    {"as", RLIMIT_AS}, {"nofile", RLIMIT_NOFILE}, {"core", RLIMIT_CORE}, {"fsize", RLIMIT_FSIZE},
    {"nproc", RLIMIT_NPROC}, {"memlock", RLIMIT_MEMLOCK},
  };
  const char *eq = strchr(spec, '=');
  if (!eq) die("--rlimit takes NAME=VALUE, got %s", spec);
  char *end;
  unsigned long long v = strtoull(eq + 1, &end, 10);
  if (*end || end == eq + 1) die("--rlimit %s: value must be a number", spec);
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    if (strncmp(spec, names[i].name, (size_t)(eq - spec)) || names[i].name[eq - spec]) continue;
    struct rlimit rl = {v, v};
    if (setrlimit(names[i].res, &rl) < 0) die("setrlimit %s: %s", spec, strerror(errno));
    return;
  }
  die("unknown rlimit %s", spec);
}

int main(int argc, char **argv) {
  long uid = -1, gid = -1, nice_v = 0;
  int proc = 0, host_net = 0, i;
  gid_t groups[32];
  int ngroups = 0;
  const char *rlimits[16], *setenvs[16], *cgroups[8];
  int nrl = 0, nenv = 0, ncg = 0;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) { i++; break; }
    if (i + 1 >= argc && strcmp(a, "--proc") && strcmp(a, "--host-net")) die("%s needs a value", a);
    if (!strcmp(a, "--uid")) uid = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--gid")) gid = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--group")) { if (ngroups == 32) die("too many groups"); groups[ngroups++] = (gid_t)strtol(argv[++i], NULL, 10); }
    else if (!strcmp(a, "--hide")) { if (nhides == MAX_PATHS) die("too many paths"); hides[nhides++] = argv[++i]; }
    else if (!strcmp(a, "--ro")) add_bind(argv[++i], 1);
    else if (!strcmp(a, "--rw")) add_bind(argv[++i], 0);
    else if (!strcmp(a, "--rlimit")) { if (nrl == 16) die("too many rlimits"); rlimits[nrl++] = argv[++i]; }
    else if (!strcmp(a, "--nice")) nice_v = strtol(argv[++i], NULL, 10);
    else if (!strcmp(a, "--cgroup")) { if (ncg == 8) die("too many --cgroup"); cgroups[ncg++] = argv[++i]; }
    else if (!strcmp(a, "--setenv")) { if (nenv == 16) die("too many --setenv"); setenvs[nenv++] = argv[++i]; }
    else if (!strcmp(a, "--proc")) proc = 1;
    else if (!strcmp(a, "--host-net")) host_net = 1;
    else die("unknown option %s", a);
  }
  if (i >= argc) die("usage: forgevm-jail [options] -- program [args...]");
  if (uid <= 0 || gid <= 0) die("--uid and --gid (not root) are required");

  /* Into the VM's cgroups first (host-side memory, CPU and task limits), while /sys is ours. */
  for (int c = 0; c < ncg; c++) {
    int fd = open(cgroups[c], O_WRONLY | O_CLOEXEC);
    if (fd < 0) die("open %s: %s", cgroups[c], strerror(errno));
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (write(fd, pid, (size_t)n) != n) die("joining %s: %s", cgroups[c], strerror(errno));
    close(fd);
  }
  /* Its own mount, network and IPC namespaces: the new network namespace has only a loopback
   * that is down, so the VMM can reach no host service (its sockets are paths, which work
   * across network namespaces). */
  /* --host-net keeps the host's network namespace, for a VMM with a user-mode network device
   * (the server's firewall then confines its uid). */
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC | (host_net ? 0 : CLONE_NEWNET)) < 0) die("unshare: %s", strerror(errno));
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("making mounts private: %s", strerror(errno));
  open_binds();
  for (int h = 0; h < nhides; h++) {
    int nested = 0;
    for (int o = 0; o < nhides; o++) nested |= o != h && under(hides[h], hides[o]) && strcmp(hides[h], hides[o]);
    if (nested) continue; /* covered by an outer hidden directory already */
    struct stat st;
    if (stat(hides[h], &st) < 0 || !S_ISDIR(st.st_mode)) continue;
    if (mount("forgevm-jail", hides[h], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0)
      die("hiding %s: %s", hides[h], strerror(errno));
  }
  for (int b = 0; b < nbinds; b++) {
    int hidden = 0;
    for (int h = 0; h < nhides; h++) hidden |= under(binds[b].path, hides[h]);
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", binds[b].fd);
    if (hidden) {
      make_dirs(binds[b].path);
      if (binds[b].dir) {
        if (mkdir(binds[b].path, 0755) < 0 && errno != EEXIST) die("mkdir %s: %s", binds[b].path, strerror(errno));
      } else {
        int fd = open(binds[b].path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) die("creating %s: %s", binds[b].path, strerror(errno));
        close(fd);
      }
      if (mount(src, binds[b].path, NULL, MS_BIND, NULL) < 0) die("binding %s: %s", binds[b].path, strerror(errno));
    } else if (binds[b].ro) {
      /* still visible: bind it onto itself so it can be made read-only */
      if (mount(src, binds[b].path, NULL, MS_BIND, NULL) < 0) die("binding %s: %s", binds[b].path, strerror(errno));
    }
    if (binds[b].ro && mount(NULL, binds[b].path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
      die("making %s read-only: %s", binds[b].path, strerror(errno));
    close(binds[b].fd);
  }
  if (proc && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") < 0)
    die("mounting /proc: %s", strerror(errno));

  for (int r = 0; r < nrl; r++) set_rlimit(rlimits[r]);
  if (nice_v && setpriority(PRIO_PROCESS, 0, (int)nice_v) < 0) die("setpriority: %s", strerror(errno));
  if (setgroups((size_t)ngroups, groups) < 0) die("setgroups: %s", strerror(errno));
  if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0) die("setgid %ld: %s", gid, strerror(errno));
  if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) die("setuid %ld: %s", uid, strerror(errno));
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs: %s", strerror(errno));
  if (chdir("/") < 0) die("chdir /: %s", strerror(errno));
  /* Set only now: a preload library meant for the VMM must not act on this helper. */
  for (int e = 0; e < nenv; e++) {
    char *eq = strchr(setenvs[e], '=');
    if (!eq || eq == setenvs[e]) die("--setenv takes NAME=VALUE, got %s", setenvs[e]);
    *eq = 0;
    if (setenv(setenvs[e], eq + 1, 1) < 0) die("setenv: %s", strerror(errno));
  }
  execv(argv[i], argv + i);
  die("exec %s: %s", argv[i], strerror(errno));
}
