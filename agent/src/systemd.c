/* System images (docs/system-images.md): the kernel command line says fvm.init=systemd, so once
 * the root is switched the agent hands PID 1 to the image's systemd and comes back as its first
 * service. The agent's binary lives in the initramfs, which the image cannot see, so it is copied
 * into /run (a tmpfs systemd keeps, as it keeps an initrd's) with a runtime unit beside it: the
 * image's files are never changed. As a service the agent owns a delegated cgroup and puts every
 * exec's processes in a `sandbox` cgroup under it, as PID 1 does at the top of the tree. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT_COPY "/run/forgevm/agent"
#define UNIT_DIR "/run/systemd/system"
#define UNIT_NAME "forgevm-agent.service"

int service_mode = 0;

/* Ordered before sysinit.target with no default dependencies: the host can talk to the guest
 * while the rest of the system still starts. Delegate: the agent runs its own cgroup subtree.
 * KillMode=process: a restart of the agent leaves the sandbox's processes running. */
static const char UNIT[] =
    "[Unit]\n"
    "Description=ForgeVM guest agent (the host's channel into this VM)\n"
    "DefaultDependencies=no\n"
    "Before=sysinit.target\n"
    "\n"
    "[Service]\n"
    "ExecStart=" AGENT_COPY " --service\n"
    "Delegate=yes\n"
    "KillMode=process\n"
    "OOMScoreAdjust=-1000\n"
    "TasksMax=infinity\n"
    "Restart=on-failure\n"
    "RestartSec=1\n";

static int copy_self(const char *to) {
  int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  int ok = out >= 0;
  char buf[65536];
  ssize_t n;
  while (ok && (n = read(in, buf, sizeof buf)) != 0) ok = n > 0 && write(out, buf, (size_t)n) == n;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return ok ? 0 : -1;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  return ok ? 0 : -1;
}

/* Called as PID 1 with the image's root in place. Returns only when systemd cannot be started;
 * the agent then goes on as PID 1, so the sandbox still answers and its log says why. */
void systemd_handover(void) {
  const char *init = access("/lib/systemd/systemd", X_OK) == 0 ? "/lib/systemd/systemd" : "/sbin/init";
  if (access(init, X_OK) < 0) {
    alog("fvm.init=systemd, but the image has no /lib/systemd/systemd or /sbin/init: booting without it");
    return;
  }
  mount_fs("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  if (mkdir_parents(UNIT_DIR "/sysinit.target.wants", 0755) < 0 || mkdir_parents("/run/forgevm", 0755) < 0 || copy_self(AGENT_COPY) < 0 ||
      write_file(UNIT_DIR "/" UNIT_NAME, UNIT) < 0 || (symlink("../" UNIT_NAME, UNIT_DIR "/sysinit.target.wants/" UNIT_NAME) < 0 && errno != EEXIST)) {
    alog("preparing the agent's unit for systemd: %s; booting without systemd", strerror(errno));
    umount("/run");
    return;
  }
  char *argv[] = {(char *)init, NULL};
  execv(init, argv);
  alog("starting %s: %s; booting without systemd", init, strerror(errno));
  umount("/run");
}

/* The agent's own cgroup as systemd gave it (Delegate=yes): "/sys/fs/cgroup" + the 0:: line. */
static int own_cgroup(char *out, size_t size) {
  char buf[512];
  if (read_small("/proc/self/cgroup", buf, sizeof buf) <= 0) return -1;
  char *line = strstr(buf, "0::");
  if (!line) return -1;
  line += 3;
  line[strcspn(line, "\n")] = 0;
  if (snprintf(out, size, "/sys/fs/cgroup%s", strcmp(line, "/") ? line : "") >= (int)size) return -1;
  return 0;
}

/* "--service": systemd started the agent. PID 1's share of bring-up is done; what is left is the
 * hostname, being the reaper of what execs leave behind, and the cgroups. A delegated cgroup may
 * not hold processes and enable controllers at once, so the agent moves into a leaf of its own
 * and execs go into `sandbox` beside it. */
void service_init(void) {
  service_mode = 1;
  read_cmdline();
  char val[256], base[120], path[200], pid[24];
  if (cmdline_get("fvm.hostname", val, sizeof val)) set_hostname(val);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (own_cgroup(base, sizeof base) < 0) {
    alog("cannot find the agent's own cgroup: execs run without the sandbox's limits");
    return;
  }
  snprintf(path, sizeof path, "%s/agent", base);
  if (mkdir(path, 0755) < 0 && errno != EEXIST) alog("cgroup %s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/agent/cgroup.procs", base);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  if (write_str(path, pid) < 0) alog("moving the agent into %s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/cgroup.subtree_control", base);
  if (write_str(path, "+pids +memory +cpu") < 0) alog("cgroup controllers under %s: %s", base, strerror(errno));
  snprintf(sandbox_cgroup, sizeof sandbox_cgroup, "%s/sandbox", base);
  if (mkdir(sandbox_cgroup, 0755) < 0 && errno != EEXIST) alog("cgroup %s: %s", sandbox_cgroup, strerror(errno));
}
