/* The fork-bomb guard. Every exec'd process lives in the sandbox cgroup (in a cgroup of its exec's
 * own below it), whose pids limit stops a fork bomb from taking the guest down; but a bomb whose
 * exec has ended (`:(){ :|:& };:` returns at once) goes on holding every task the limit allows, so
 * nothing new can start in the sandbox until someone kills it by hand. The kernel tells us each
 * time a fork is refused for the limit (pids.events changes, a poll event on its file); the guard
 * then ends the exec whose cgroup holds most of the sandbox's tasks, all of it at once
 * (cgroup.kill), so a bomb whose processes call setsid() is ended as surely as one that stays in
 * its process group; without exec cgroups it ends the largest process group instead. A
 * legitimate workload that reaches the limit (make -j of a thousand jobs) is ended the same way:
 * past the limit it could not go on anyway. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A group this small is not what filled the limit: left alone. */
#define MIN_BOMB_TASKS 16

static int events_fd = -1;
static long long refused_seen;

static long long refused_count(void) {
  char buf[256];
  if (events_fd < 0 || lseek(events_fd, 0, SEEK_SET) < 0) return -1;
  ssize_t n = read(events_fd, buf, sizeof buf - 1); /* reading also re-arms the poll event */
  if (n <= 0) return -1;
  buf[n] = 0;
  char *m = strstr(buf, "max ");
  return m ? atoll(m + 4) : -1;
}

int pids_guard_fd(void) {
  if (events_fd >= 0) return events_fd;
  char path[256];
  events_fd = open(sandbox_file(path, sizeof path, "pids.events"), O_RDONLY | O_CLOEXEC);
  if (events_fd >= 0) refused_seen = refused_count();
  return events_fd;
}

/* The process group with the most tasks in the sandbox cgroup, and how many it has. */
static pid_t largest_group(int *tasks) {
  enum { MAX_GROUPS = 256 };
  pid_t groups[MAX_GROUPS];
  int counts[MAX_GROUPS], n = 0;
  DIR *proc = opendir("/proc");
  struct dirent *e;
  while (proc && (e = readdir(proc))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%.20s/cgroup", e->d_name);
    if (read_small(path, buf, sizeof buf) <= 0 || strncmp(buf, "0::/sandbox", 11) || (buf[11] != '\n' && buf[11] != '/')) continue;
    snprintf(path, sizeof path, "/proc/%.20s/stat", e->d_name);
    if (read_small(path, buf, sizeof buf) <= 0) continue;
    /* pid (comm) state ppid pgrp: comm may hold anything, so read after the last ')' */
    char *close_paren = strrchr(buf, ')');
    int ppid, pgrp;
    char state;
    if (!close_paren || sscanf(close_paren + 1, " %c %d %d", &state, &ppid, &pgrp) != 3 || pgrp <= 1) continue;
    int i = 0;
    while (i < n && groups[i] != pgrp) i++;
    if (i == n) {
      if (n == MAX_GROUPS) continue;
      groups[n] = pgrp;
      counts[n++] = 0;
    }
    counts[i]++;
  }
  if (proc) closedir(proc);
  int best = -1;
  for (int i = 0; i < n; i++)
    if (best < 0 || counts[i] > counts[best]) best = i;
  *tasks = best < 0 ? 0 : counts[best];
  return best < 0 ? 0 : groups[best];
}

/* The exec cgroup (x<pid>) holding most processes, and how many; 0 when there is none. */
static pid_t largest_exec(int *tasks) {
  pid_t best = 0;
  *tasks = 0;
  DIR *d = opendir(sandbox_cgroup);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] != 'x') continue;
    char path[448];
    snprintf(path, sizeof path, "%s/%s/cgroup.procs", sandbox_cgroup, e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    int lines = 0;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
      for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
    close(fd);
    if (lines > *tasks) {
      *tasks = lines;
      best = (pid_t)atoi(e->d_name + 1);
    }
  }
  if (d) closedir(d);
  return best;
}

void pids_guard_check(void) {
  long long now = refused_count();
  if (now <= refused_seen) return;
  refused_seen = now;
  int tasks;
  pid_t exec = largest_exec(&tasks);
  if (exec && tasks >= MIN_BOMB_TASKS) {
    exec_cgroup_kill(exec);
    alog("ended the processes of exec %d (%d tasks): they reached the sandbox's task limit", (int)exec, tasks);
    refused_seen = refused_count();
    return;
  }
  pid_t pgrp = largest_group(&tasks);
  if (!pgrp || tasks < MIN_BOMB_TASKS) return;
  /* Members forking while the signal is delivered can add more: again until the group is empty. */
  for (int round = 0; round < 1000 && kill(-pgrp, SIGKILL) == 0; round++) usleep(1000);
  alog("ended process group %d (%d tasks): it reached the sandbox's task limit", (int)pgrp, tasks);
  refused_seen = refused_count();
}
