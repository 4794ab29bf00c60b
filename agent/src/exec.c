/* Past 400 lines because pipes, PTYs, credit and timeouts all act on the same session record.
 * Process execution: pipes or a PTY, streamed output under per-stream credit, stdin from the
 * host, timeouts that kill the whole process group, signals and terminal resize. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

#define EXIT_GRACE_MS 200  /* after exit, how long to wait for pipes held open by background jobs */
#define MAX_ARGS 4096
#define MAX_ENV 4096
#define MAX_NOTE 8192      /* the host's words about a process (exec "note") */
#define MAX_CMD 256        /* how much of a command line procs shows */
/* A detached process's output is kept for the host that adopts it: the newest KEEP_PER_STREAM
 * bytes of each stream, at most KEEP_TOTAL over all of them (past it, new output is counted as
 * lost), and the exits of at most KEEP_ENDED processes that ended while detached. */
#define KEEP_PER_STREAM (256u * 1024)
#define KEEP_TOTAL (8u * 1024 * 1024)
#define KEEP_ENDED 64

static size_t kept_total;

char sandbox_cgroup[160] = "/sys/fs/cgroup/sandbox";

/* The path of `file` in the sandbox's cgroup. */
char *sandbox_file(char *out, size_t size, const char *file) {
  snprintf(out, size, "%s/%s", sandbox_cgroup, file);
  return out;
}

/* The path of `file` in the cgroup of the exec whose first process is `pid`, made when `file` is
 * its cgroup.procs (the child calls this before it execs). */
void exec_cgroup(char *out, size_t size, pid_t pid, const char *file) {
  snprintf(out, size, "%s/x%d", sandbox_cgroup, (int)pid);
  if (!strcmp(file, "cgroup.procs") && mkdir(out, 0755) < 0 && errno != EEXIST) { snprintf(out, size, "/nonexistent"); return; }
  size_t n = strlen(out);
  snprintf(out + n, size - n, "/%s", file);
}

/* Ends every process an exec made, whatever session or group it moved to (cgroup.kill). */
void exec_cgroup_kill(pid_t pid) {
  char path[256];
  exec_cgroup(path, sizeof path, pid, "cgroup.kill");
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0) { if (write(fd, "1", 1) < 0) {} close(fd); }
}

/* Removes the cgroups of execs whose processes have all gone (rmdir refuses a populated one). */
static void sweep_cgroups(void) {
  DIR *d = opendir(sandbox_cgroup);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] != 'x') continue;
    char path[448];
    snprintf(path, sizeof path, "%s/%s", sandbox_cgroup, e->d_name);
    rmdir(path);
  }
  if (d) closedir(d);
}

static void *tag_of(sess *s, int which) { return (void *)((uintptr_t)s | (uintptr_t)which); }

static int *fd_of(sess *s, int which) {
  return which == CH_IN ? &s->in_fd : which == CH_OUT ? &s->out_fd : &s->err_fd;
}

/* Re-arm epoll for one stream according to credit and the host queue. */
static void rearm(sess *s, int which) {
  int fd = *fd_of(s, which);
  if (fd < 0) return;
  uint32_t ev = 0;
  if (which == CH_IN) {
    if (s->inlen > s->inoff) ev = EPOLLOUT;
    if (s->pty) {
      /* in_fd and out_fd are the same PTY master: one registration carries both interests */
      if (s->credit[CH_OUT] > 0 && outq_bytes() < OUTQ_HIGH) ev |= EPOLLIN;
    }
  } else {
    if (s->credit[which] > 0 && outq_bytes() < OUTQ_HIGH) ev = EPOLLIN;
    if (s->pty && s->inlen > s->inoff) ev |= EPOLLOUT;
  }
  /* An fd with no interest must leave the set: EPOLLHUP is reported even with an empty mask. */
  if (!ev) unwatch_fd(fd);
  else watch_fd(fd, ev, tag_of(s, which == CH_IN && s->pty ? CH_OUT : which));
}

static void close_stream(sess *s, int which) {
  int *fd = fd_of(s, which);
  if (*fd < 0) return;
  int shared = s->pty && (which == CH_IN || which == CH_OUT);
  if (shared) {
    /* the PTY master serves both directions: close it once, when output ends */
    if (which == CH_IN) { s->in_fd = -1; return; }
    s->in_fd = -1;
  }
  unwatch_fd(*fd);
  close(*fd);
  *fd = -1;
  if (which != CH_IN && !s->detached) send_frame(s->id, K_DATA, (uint8_t)which, F_EOF, NULL, 0);
}

/* Keeps the newest output of a detached process, within its stream's and the agent's bounds. */
static void keep_output(sess *s, int which, const char *p, size_t n) {
  size_t have = s->kept_len[which];
  size_t next = have + n < KEEP_PER_STREAM ? have + n : KEEP_PER_STREAM;
  if (next > have && kept_total + (next - have) > KEEP_TOTAL) { s->kept_lost += n; return; }
  if (n > next) { s->kept_lost += n - next; p += n - next; n = next; }
  if (next > have) {
    uint8_t *nb = realloc(s->kept[which], next);
    if (!nb) { s->kept_lost += n; return; }
    s->kept[which] = nb;
    kept_total += next - have;
  }
  size_t drop = have + n - next; /* the oldest bytes that make room */
  memmove(s->kept[which], s->kept[which] + drop, have - drop);
  memcpy(s->kept[which] + have - drop, p, n);
  s->kept_len[which] = next;
  s->kept_lost += drop;
}

/* Output a host never got (queued when it went away, or held before a server let go of the
 * guest) goes to what the process keeps for the next host, before anything it writes later. */
void exec_keep_queued(uint32_t id, uint8_t chan, const uint8_t *p, size_t n) {
  sess *s = sess_find(id);
  if (s && s->type == S_EXEC && !s->detached && (chan == CH_OUT || chan == CH_ERR)) keep_output(s, chan, (const char *)p, n);
}

static void unkeep(sess *s, int which) {
  kept_total -= s->kept_len[which];
  free(s->kept[which]);
  s->kept[which] = NULL;
  s->kept_len[which] = 0;
}

/* What only an exec session holds, released with it (its on_free hook). */
static void exec_free(sess *s) {
  unkeep(s, CH_OUT);
  unkeep(s, CH_ERR);
  free(s->note);
  free(s->cmd);
}

static void flush_stdin(sess *s) {
  while (s->in_fd >= 0 && s->inoff < s->inlen) {
    ssize_t w = write(s->in_fd, s->inbuf + s->inoff, s->inlen - s->inoff);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) break;
    if (w <= 0) { /* reader went away: discard the rest */
      s->in_unacked += (uint32_t)(s->inlen - s->inoff);
      s->inoff = s->inlen;
      break;
    }
    s->inoff += (size_t)w;
    s->in_unacked += (uint32_t)w;
  }
  if (s->inoff == s->inlen) s->inoff = s->inlen = 0;
  if (s->in_unacked) { send_window(s->id, CH_IN, s->in_unacked); s->in_unacked = 0; }
  if (s->in_eof && s->inlen == 0 && s->in_fd >= 0) {
    if (s->pty) { char eot = 4; if (write(s->in_fd, &eot, 1) < 0) {} s->in_fd = -1; }
    else close_stream(s, CH_IN);
  }
  if (s->in_fd >= 0) rearm(s, CH_IN);
}

void exec_on_data(sess *s, const uint8_t *p, size_t n, int eof) {
  if (s->in_fd < 0) {
    if (n) send_window(s->id, CH_IN, (uint32_t)n); /* stdin closed: keep the host's credit flowing */
    return;
  }
  if (n && sess_buffer_input(s, p, n) < 0) {
    /* Bytes that cannot be kept would leave a hole in the input: the process gets none after them. */
    send_window(s->id, CH_IN, (uint32_t)n);
    s->inoff = s->inlen = 0;
    close_stream(s, CH_IN);
    return;
  }
  if (eof) s->in_eof = 1;
  flush_stdin(s);
}

void exec_on_window(sess *s, uint8_t chan, uint32_t n) {
  if (chan != CH_OUT && chan != CH_ERR) return;
  s->credit[chan] += n;
  if (s->credit[chan] > (int64_t)INITIAL_WINDOW * 256) s->credit[chan] = (int64_t)INITIAL_WINDOW * 256;
  rearm(s, chan);
}

static void pump_output(sess *s, int which) {
  static char buf[DATA_CHUNK];
  int fd = *fd_of(s, which);
  while (fd >= 0 && s->credit[which] > 0 && outq_bytes() < OUTQ_HIGH) {
    size_t want = s->credit[which] < DATA_CHUNK ? (size_t)s->credit[which] : DATA_CHUNK;
    ssize_t r = read(fd, buf, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) break;
    if (r <= 0) { close_stream(s, which); return; } /* EOF, or EIO from a PTY whose slave closed */
    if (s->detached) { keep_output(s, which, buf, (size_t)r); continue; } /* the process never blocks */
    s->credit[which] -= r;
    send_frame(s->id, K_DATA, (uint8_t)which, 0, buf, (size_t)r);
    if ((size_t)r < want) break;
  }
  rearm(s, which);
}

void exec_on_fd(sess *s, int which, uint32_t events) {
  if (which == CH_OUT && s->pty && (events & EPOLLOUT)) flush_stdin(s);
  if (which == CH_IN) { flush_stdin(s); return; }
  if (*fd_of(s, which) < 0) return;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) pump_output(s, which);
}

void exec_reap(pid_t pid, int status) {
  for (sess *s = sessions; s; s = s->next) {
    if (s->type == S_EXEC && s->pid == pid && !s->exited) {
      s->exited = 1;
      s->status = status;
      s->grace_ms = now_ms() + EXIT_GRACE_MS;
      return;
    }
  }
}

uint64_t exec_next_deadline(sess *s) {
  if (s->ended) return 0;
  if (!s->exited) return s->deadline_ms;
  return s->grace_ms;
}

static int exit_code(const sess *s, int *sig) {
  *sig = 0;
  if (s->timed_out) return 124;
  if (WIFEXITED(s->status)) return WEXITSTATUS(s->status);
  if (WIFSIGNALED(s->status)) { *sig = WTERMSIG(s->status); return 128 + *sig; }
  return 255;
}

static int ended_count(void) {
  int n = 0;
  for (sess *s = sessions; s; s = s->next) n += s->type == S_EXEC && s->ended;
  return n;
}

int exec_detached_count(void) {
  int n = 0;
  for (sess *s = sessions; s; s = s->next) n += s->type == S_EXEC && s->detached;
  return n;
}

static void finish(sess *s) {
  if (s->detached) {
    /* Its exit waits for a host to adopt it; past the bound, this one is forgotten. */
    if (ended_count() >= KEEP_ENDED) sess_free(s);
    else s->ended = 1;
    return;
  }
  int sig, code = exit_code(s, &sig);
  /* Its cgroup, and those of execs before it, go once empty: now and then, not on every exec. */
  static unsigned finished;
  if (++finished % 32 == 1) sweep_cgroups();
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"exit_code\":");
  jb_int(&b, code);
  jb_cstr(&b, s->timed_out ? ",\"timed_out\":true" : ",\"timed_out\":false");
  if (sig) { jb_cstr(&b, ",\"signal\":"); jb_int(&b, sig); }
  jb_cstr(&b, "}");
  send_json(s->id, K_RES, &b);
  jb_free(&b);
  sess_free(s);
}

void exec_tick(sess *s, uint64_t now) {
  if (s->ended) return;
  if (!s->exited && s->deadline_ms && now >= s->deadline_ms) {
    s->timed_out = 1;
    s->deadline_ms = 0;
    kill(-s->pid, SIGKILL);
    exec_cgroup_kill(s->pid);
  }
  if (s->out_fd >= 0) rearm(s, CH_OUT);
  if (s->err_fd >= 0) rearm(s, CH_ERR);
  if (!s->exited) return;
  int open_out = s->out_fd >= 0, open_err = s->err_fd >= 0;
  if (open_out || open_err) {
    if (now < s->grace_ms) return;
    /* Background processes still hold the pipes. Send what is buffered if the host has room,
     * then stop waiting; anything they write later is theirs to lose. */
    int starved = (open_out && s->credit[CH_OUT] <= 0) || (open_err && s->credit[CH_ERR] <= 0);
    if (starved) return;
    if (open_out) pump_output(s, CH_OUT);
    if (open_err) pump_output(s, CH_ERR);
    if (s->out_fd >= 0) close_stream(s, CH_OUT);
    if (s->err_fd >= 0) close_stream(s, CH_ERR);
  }
  finish(s);
}

/* A process whose host went away (the server stopped, or another one took over the guest: a
 * paused sandbox resumed, a snapshot restored): it keeps running with its stdin open, its output
 * is read and kept (keep_output) so it never blocks, its exit waits for a host, and its session
 * leaves the host's id space so new requests cannot collide. A host finds it with procs and
 * takes it over with adopt. */
void exec_detach(sess *s) {
  static uint32_t next_id = 0x80000000u;
  s->detached = 1;
  s->id = next_id++;
  if (next_id < 0x80000000u) next_id = 0x80000000u;
  s->inlen = s->inoff = 0;
  s->in_unacked = 0;
  s->credit[CH_OUT] = s->credit[CH_ERR] = INITIAL_WINDOW;
  if (s->out_fd >= 0) rearm(s, CH_OUT);
  if (s->err_fd >= 0) rearm(s, CH_ERR);
}

static char **json_str_array(const jdoc *d, int t, int max, const char *err_field, uint32_t id) {
  if (d->toks[t].type != J_ARR || d->toks[t].size > max) {
    send_error(id, "EINVAL", "\"%s\" must be an array of at most %d strings", err_field, max);
    return NULL;
  }
  int n = d->toks[t].size;
  char **out = calloc((size_t)n + 1, sizeof(char *));
  int i = t + 1;
  for (int k = 0; k < n; k++) {
    out[k] = json_strdup(d, i, NULL);
    if (!out[k]) {
      send_error(id, "EINVAL", "\"%s\" must contain only strings", err_field);
      for (int j = 0; j < k; j++) free(out[j]);
      free(out);
      return NULL;
    }
    i = json_skip(d, i);
  }
  return out;
}

static void free_strv(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

/* Sets or replaces NAME=value in env (a NULL-terminated, malloc'd vector). */
static char **env_set(char **env, int *n, const char *name, size_t nlen, const char *val) {
  for (int i = 0; i < *n; i++) {
    if (!strncmp(env[i], name, nlen) && env[i][nlen] == '=') {
      free(env[i]);
      if (asprintf(&env[i], "%.*s=%s", (int)nlen, name, val) < 0) env[i] = NULL;
      return env;
    }
  }
  char **ne = realloc(env, sizeof(char *) * (size_t)(*n + 2));
  if (!ne) return env;
  if (asprintf(&ne[*n], "%.*s=%s", (int)nlen, name, val) < 0) return ne;
  ne[++*n] = NULL;
  return ne;
}

static int make_pipe(int p[2]) { return pipe2(p, O_CLOEXEC); }

void op_exec(uint32_t id, const jdoc *d) {
  reclaim_end(); /* work again: free page reporting back to whole blocks */
  char **argv = NULL, **env = NULL, *cwd = NULL, *user = NULL;
  int nenv = 0;
  int t = json_get(d, 0, "argv");
  if (t >= 0) {
    if (!(argv = json_str_array(d, t, MAX_ARGS, "argv", id))) return;
    if (!argv[0]) { free(argv); send_error(id, "EINVAL", "\"argv\" must not be empty"); return; }
  } else {
    char *cmd = req_str(d, "cmd");
    if (!cmd) { send_error(id, "EINVAL", "exec needs \"argv\" (array) or \"cmd\" (string)"); return; }
    argv = calloc(4, sizeof(char *));
    argv[0] = strdup("/bin/sh");
    argv[1] = strdup("-c");
    argv[2] = cmd;
  }
  int64_t timeout_ms, rows, cols, uid_req, umask_req;
  if (req_int(d, "timeout_ms", 0, &timeout_ms) < 0 || timeout_ms < 0) {
    free_strv(argv);
    send_error(id, "EINVAL", "\"timeout_ms\" must be a non-negative integer");
    return;
  }
  req_int(d, "uid", -1, &uid_req);
  req_int(d, "umask", -1, &umask_req);
  int use_stdin = req_bool(d, "stdin", 0);
  int pt = json_get(d, 0, "pty");
  int use_pty = pt >= 0 && d->toks[pt].type == J_OBJ;
  rows = 24; cols = 80;
  if (use_pty) {
    int64_t v;
    if (json_int(d, json_get(d, pt, "rows"), &v) == 0 && v > 0 && v < 10000) rows = v;
    if (json_int(d, json_get(d, pt, "cols"), &v) == 0 && v > 0 && v < 10000) cols = v;
  }
  cwd = req_str(d, "cwd");
  user = req_str(d, "user");
  char *note = req_str(d, "note");
  if (note && strlen(note) > MAX_NOTE) {
    send_error(id, "EINVAL", "\"note\" must be at most %d bytes", MAX_NOTE);
    free(note);
    free_strv(argv);
    free(cwd);
    free(user);
    return;
  }

  /* Resolve the user before forking so that a bad name is an error reply, not a dead child. */
  uid_t uid = 0;
  gid_t gid = 0;
  const char *home = "/root", *uname = "root";
  struct passwd *pw = NULL;
  if (user && *user) {
    char *end;
    long n = strtol(user, &end, 10);
    pw = *end ? getpwnam(user) : getpwuid((uid_t)n);
    if (!pw && *end) {
      send_error(id, "EINVAL", "unknown user \"%.64s\" (not in the guest's /etc/passwd)", user);
      goto out;
    }
    if (!pw) { uid = (uid_t)n; gid = (gid_t)n; uname = user; home = "/"; }
  } else if (uid_req >= 0) {
    pw = getpwuid((uid_t)uid_req);
    if (!pw) { uid = (uid_t)uid_req; gid = (gid_t)uid_req; uname = "?"; home = "/"; }
  } else {
    pw = getpwuid(0);
  }
  if (pw) { uid = pw->pw_uid; gid = pw->pw_gid; home = pw->pw_dir; uname = pw->pw_name; }

  env = calloc(1, sizeof(char *));
  env = env_set(env, &nenv, "PATH", 4, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  env = env_set(env, &nenv, "HOME", 4, home);
  env = env_set(env, &nenv, "USER", 4, uname);
  env = env_set(env, &nenv, "LOGNAME", 7, uname);
  env = env_set(env, &nenv, "LANG", 4, "C.UTF-8");
  if (use_pty) env = env_set(env, &nenv, "TERM", 4, "xterm-256color");
  int et = json_get(d, 0, "env");
  if (et >= 0 && d->toks[et].type == J_OBJ) {
    if (d->toks[et].size > MAX_ENV) { send_error(id, "EINVAL", "too many \"env\" entries"); goto out; }
    int i = et + 1;
    for (int k = 0; k < d->toks[et].size; k++) {
      size_t klen;
      char *key = json_strdup(d, i, &klen);
      char *val = json_strdup(d, i + 1, NULL);
      if (!key || !val || !klen || strchr(key, '=') || memchr(key, 0, klen)) {
        free(key);
        free(val);
        send_error(id, "EINVAL", "\"env\" must map names (without '=') to strings");
        goto out;
      }
      env = env_set(env, &nenv, key, klen, val);
      free(key);
      free(val);
      i = json_skip(d, i + 1);
    }
  } else if (et >= 0 && !(d->toks[et].type == J_PRIM && d->src[d->toks[et].start] == 'n')) {
    send_error(id, "EINVAL", "\"env\" must be an object of strings");
    goto out;
  }

  int in[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1}, master = -1, slave = -1;
  if (use_pty) {
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    if (openpty(&master, &slave, NULL, NULL, &ws) < 0) { send_errno(id, errno, "openpty"); goto out; }
    fcntl(master, F_SETFD, FD_CLOEXEC);
  } else {
    if ((use_stdin && make_pipe(in) < 0) || make_pipe(outp) < 0 || make_pipe(errp) < 0) {
      send_errno(id, errno, "pipe");
      goto out;
    }
  }

  pid_t pid = fork();
  if (pid < 0) { send_errno(id, errno, "fork"); goto out; }
  if (pid == 0) {
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int s = 1; s < 32; s++) signal(s, SIG_DFL);
    setsid();
    int devnull = open("/dev/null", O_RDWR);
    if (use_pty) {
      ioctl(slave, TIOCSCTTY, 0);
      dup2(use_stdin ? slave : devnull, 0);
      /* all three are the terminal, as in a login: shells print their prompt on stderr */
      dup2(slave, 1);
      dup2(slave, 2);
    } else {
      dup2(use_stdin ? in[0] : devnull, 0);
      dup2(outp[1], 1);
      dup2(errp[1], 2);
    }
    /* Into a cgroup of its own under the sandbox's, while still root: the sandbox's limits count
     * it, and the guard and the end of the exec reach every process it makes, setsid or not (a
     * missing cgroup only loses the limits). */
    {
      char cg[256];
      exec_cgroup(cg, sizeof cg, getpid(), "cgroup.procs");
      int fd = open(cg, O_WRONLY | O_CLOEXEC);
      if (fd < 0) fd = open(sandbox_file(cg, sizeof cg, "cgroup.procs"), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) { if (write(fd, "0", 1) < 0) {} close(fd); }
    }
    /* Credentials first, then the directory: a user may only start where it may go. */
    if (uid || gid) {
      if (pw) initgroups(pw->pw_name, gid); else setgroups(0, NULL);
      if (setgid(gid) < 0 || setuid(uid) < 0) {
        dprintf(2, "forgevm: cannot switch to uid %u: %s\n", (unsigned)uid, strerror(errno));
        _exit(126);
      }
    }
    if (umask_req >= 0) umask((mode_t)(umask_req & 0777));
    if (cwd && *cwd && chdir(cwd) < 0) {
      dprintf(2, "forgevm: cannot change directory to '%s': %s\n", cwd, strerror(errno));
      _exit(126);
    }
    if (!(cwd && *cwd) && chdir(home) < 0 && chdir("/") < 0) {}
    environ = env;
    execvp(argv[0], argv);
    int e = errno;
    dprintf(2, "forgevm: cannot execute '%s': %s\n", argv[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }
  sess *s = sess_new(id, S_EXEC);
  if (!s) { kill(-pid, SIGKILL); send_error(id, "ENOMEM", "agent out of memory"); goto out; }
  s->pid = pid;
  s->pty = use_pty;
  s->on_free = exec_free;
  s->note = note;
  note = NULL;
  {
    jbuf c;
    jb_init(&c);
    for (char **a = argv; *a && c.len < MAX_CMD; a++) {
      if (a != argv) jb_raw(&c, " ", 1);
      jb_raw(&c, *a, strlen(*a));
    }
    if (!c.oom && c.len > MAX_CMD) c.len = MAX_CMD;
    s->cmd = c.oom ? NULL : strndup(c.buf ? c.buf : "", c.len);
    jb_free(&c);
  }
  if (use_pty) {
    close(slave);
    fcntl(master, F_SETFL, O_NONBLOCK);
    s->out_fd = master;
    s->in_fd = use_stdin ? master : -1;
    s->err_fd = -1;
  } else {
    if (in[0] >= 0) { close(in[0]); s->in_fd = in[1]; fcntl(in[1], F_SETFL, O_NONBLOCK); }
    close(outp[1]);
    close(errp[1]);
    s->out_fd = outp[0];
    s->err_fd = errp[0];
  }
  fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
  if (s->err_fd >= 0) fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
  if (timeout_ms > 0) s->deadline_ms = now_ms() + (uint64_t)timeout_ms;
  rearm(s, CH_OUT);
  rearm(s, CH_ERR);
  if (s->in_fd >= 0 && !use_pty) rearm(s, CH_IN);
  {
    jbuf b;
    jb_init(&b);
    jb_cstr(&b, "{\"event\":\"started\",\"pid\":");
    jb_int(&b, pid);
    jb_cstr(&b, "}");
    send_json(id, K_EVENT, &b);
    jb_free(&b);
  }
  if (use_pty) send_frame(id, K_DATA, CH_ERR, F_EOF, NULL, 0); /* stderr is the terminal: no stream of its own */
out:
  free_strv(argv);
  free_strv(env);
  free(cwd);
  free(user);
  free(note);
}

void op_signal(uint32_t id, const jdoc *d) {
  int64_t target, sig;
  if (req_int(d, "target", -1, &target) < 0 || target < 0) { send_error(id, "EINVAL", "\"target\" (exec request id) is required"); return; }
  if (req_int(d, "signal", SIGTERM, &sig) < 0 || sig < 1 || sig > 64) { send_error(id, "EINVAL", "\"signal\" must be 1..64"); return; }
  sess *s = sess_find((uint32_t)target);
  if (!s || s->type != S_EXEC) { send_error(id, "ESRCH", "no running exec with id %lld", (long long)target); return; }
  int group = req_bool(d, "group", 1);
  if (kill(group ? -s->pid : s->pid, (int)sig) < 0 && errno != ESRCH) { send_errno(id, errno, "kill"); return; }
  /* A kill of the whole group ends whatever the exec made, in its group or not. */
  if (group && sig == SIGKILL) exec_cgroup_kill(s->pid);
  send_ok(id);
}

void op_resize(uint32_t id, const jdoc *d) {
  int64_t target, rows, cols;
  req_int(d, "target", -1, &target);
  req_int(d, "rows", 0, &rows);
  req_int(d, "cols", 0, &cols);
  sess *s = sess_find((uint32_t)target);
  if (!s || s->type != S_EXEC || !s->pty || s->out_fd < 0) { send_error(id, "ESRCH", "no running PTY exec with id %lld", (long long)target); return; }
  if (rows < 1 || rows > 9999 || cols < 1 || cols > 9999) { send_error(id, "EINVAL", "\"rows\" and \"cols\" must be 1..9999"); return; }
  struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  if (ioctl(s->out_fd, TIOCSWINSZ, &ws) < 0) { send_errno(id, errno, "resize"); return; }
  send_ok(id);
}

/* procs: the detached processes (see exec_detach), running or ended, with the note their exec
 * gave; the host adopts the ones it wants by their id. Feature adopt. */
void op_procs(uint32_t id, const jdoc *d) {
  (void)d;
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"procs\":[");
  int first = 1, truncated = 0;
  for (sess *s = sessions; s; s = s->next) {
    if (s->type != S_EXEC || !s->detached) continue;
    if (b.len > MAX_PAYLOAD - 2 * (MAX_NOTE * 6 + MAX_CMD * 6 + 256)) { truncated = 1; break; }
    if (!first) jb_cstr(&b, ",");
    first = 0;
    jb_cstr(&b, "{\"id\":");
    jb_uint(&b, s->id);
    jb_cstr(&b, ",\"pid\":");
    jb_int(&b, s->pid);
    jb_cstr(&b, s->ended ? ",\"running\":false" : ",\"running\":true");
    if (s->ended) {
      int sig, code = exit_code(s, &sig);
  /* Its cgroup, and those of execs before it, go once empty: now and then, not on every exec. */
  static unsigned finished;
  if (++finished % 32 == 1) sweep_cgroups();
      jb_cstr(&b, ",\"exit_code\":");
      jb_int(&b, code);
      if (sig) { jb_cstr(&b, ",\"signal\":"); jb_int(&b, sig); }
      if (s->timed_out) jb_cstr(&b, ",\"timed_out\":true");
    }
    jb_cstr(&b, s->pty ? ",\"pty\":true" : ",\"pty\":false");
    jb_cstr(&b, s->in_fd >= 0 ? ",\"stdin\":true" : ",\"stdin\":false");
    jb_cstr(&b, ",\"kept\":");
    jb_uint(&b, s->kept_len[CH_OUT] + s->kept_len[CH_ERR]);
    jb_cstr(&b, ",\"lost\":");
    jb_uint(&b, s->kept_lost);
    if (s->cmd) { jb_cstr(&b, ",\"cmd\":"); jb_str(&b, s->cmd, strlen(s->cmd)); }
    if (s->note) { jb_cstr(&b, ",\"note\":"); jb_str(&b, s->note, strlen(s->note)); }
    jb_cstr(&b, "}");
  }
  jb_cstr(&b, truncated ? "],\"truncated\":true}" : "]}");
  if (b.oom) send_error(id, "ENOMEM", "agent out of memory");
  else send_json(id, K_RES, &b);
  jb_free(&b);
}

/* Sends what a detached process wrote while no host held it, as its stream's first data. */
static void send_kept(sess *s, int which) {
  for (size_t off = 0; off < s->kept_len[which]; off += DATA_CHUNK) {
    size_t n = s->kept_len[which] - off < DATA_CHUNK ? s->kept_len[which] - off : DATA_CHUNK;
    send_frame(s->id, K_DATA, (uint8_t)which, 0, s->kept[which] + off, n);
    s->credit[which] -= (int64_t)n;
  }
  unkeep(s, which);
}

/* adopt {target}: a host takes over a detached process as if its own exec had started it: the
 * reply stream (this request's id) gets the "started" event, the output kept meanwhile, then the
 * live output, stdin if it is still open, and the exit as exec's reply. Feature adopt. */
void op_adopt(uint32_t id, const jdoc *d) {
  int64_t target;
  if (req_int(d, "target", -1, &target) < 0 || target < 0) { send_error(id, "EINVAL", "\"target\" (a detached process's id from procs) is required"); return; }
  sess *s = sess_find((uint32_t)target);
  if (!s || s->type != S_EXEC || !s->detached) { send_error(id, "ESRCH", "no detached process with id %lld", (long long)target); return; }
  s->id = id;
  s->detached = 0;
  s->credit[CH_OUT] = s->credit[CH_ERR] = INITIAL_WINDOW;
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"event\":\"started\",\"pid\":");
  jb_int(&b, s->pid);
  jb_cstr(&b, ",\"adopted\":true");
  if (s->kept_lost) { jb_cstr(&b, ",\"lost\":"); jb_uint(&b, s->kept_lost); }
  jb_cstr(&b, "}");
  send_json(id, K_EVENT, &b);
  jb_free(&b);
  s->kept_lost = 0;
  send_kept(s, CH_OUT);
  send_kept(s, CH_ERR);
  if (s->out_fd < 0) send_frame(id, K_DATA, CH_OUT, F_EOF, NULL, 0);
  if (s->err_fd < 0) send_frame(id, K_DATA, CH_ERR, F_EOF, NULL, 0);
  if (s->ended) {
    s->ended = 0;
    finish(s);
    return;
  }
  if (s->out_fd >= 0) rearm(s, CH_OUT);
  if (s->err_fd >= 0) rearm(s, CH_ERR);
  if (s->in_fd >= 0 && !s->pty) rearm(s, CH_IN);
}

/* killall: ends every process of the sandbox (cgroup.kill of its cgroup, execs' own included),
 * as a stop does before the sandbox is saved. Feature killall. */
void op_killall(uint32_t id, const jdoc *d) {
  (void)d;
  char path[256];
  int fd = open(sandbox_file(path, sizeof path, "cgroup.kill"), O_WRONLY | O_CLOEXEC);
  if (fd < 0) { send_errno(id, errno, "cgroup.kill"); return; }
  int r = write(fd, "1", 1) < 0 ? errno : 0;
  close(fd);
  if (r) { send_errno(id, r, "cgroup.kill"); return; }
  send_ok(id);
}
