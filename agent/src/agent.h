/* Shared declarations of the ForgeVM guest agent. The wire format is described in
 * docs/protocol.md; keep the two in step. */
#ifndef FVM_AGENT_H
#define FVM_AGENT_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include "json.h"

#define AGENT_VERSION "0.1.0"
#define PROTO_VERSION 1
#define PORT_NAME "org.forgevm.agent"

#define HDR_SIZE 12
#define MAX_PAYLOAD (1u << 20)      /* frames larger than this are refused by both sides */
#define DATA_CHUNK 65536            /* largest DATA payload the agent sends */
#define INITIAL_WINDOW (1024u * 1024) /* per-stream credit before the first WINDOW frame */
#define OUTQ_HIGH (4u * 1024 * 1024) /* stop producing while this much waits for the host */

enum frame_kind { K_HELLO = 1, K_REQ = 2, K_RES = 3, K_DATA = 4, K_WINDOW = 5, K_EVENT = 6 };
enum { F_EOF = 1 };
enum { CH_IN = 0, CH_OUT = 1, CH_ERR = 2 };

enum sess_type { S_EXEC = 1, S_READ, S_WRITE, S_LISTEN, S_TCP, S_WATCH, S_SHARE };

typedef struct sess {
  uint32_t id;
  enum sess_type type;
  struct sess *next;
  /* exec */
  pid_t pid;
  int in_fd, out_fd, err_fd, pty;
  int64_t credit[3];
  int exited, status, timed_out;
  int detached; /* its host is gone but it runs on, kept for the host that adopts it (exec_detach) */
  int ended;    /* detached and exited: its exit and kept output wait for an adopt */
  uint8_t *kept[3]; /* a detached process's newest output, per channel, for the host that adopts it */
  size_t kept_len[3];
  uint64_t kept_lost; /* bytes it wrote while detached that were not kept */
  char *note;   /* the host's words about the process (exec "note"), given back by procs */
  char *cmd;    /* the start of its command line, for procs */
  uint64_t deadline_ms, grace_ms;
  char *inbuf;
  size_t inlen, inoff;
  int in_eof;
  uint32_t in_unacked;
  /* read / write */
  int fd;
  uint64_t done;
  int64_t remaining;
  char *tmp_path, *final_path;
  int mode;
  int64_t as_uid, as_gid; /* filesystem identity of a write stream, -1: root */
  /* tcp: connect in progress, guest side sent EOF, write side shut, stream finished */
  int connecting, rd_eof, wr_shut, closing;
  /* watch: the watched directories (watch.c) */
  void *watch;
  /* what only the session's owner can release, called by sess_free */
  void (*on_free)(struct sess *s);
} sess;

/* util.c */
uint64_t now_ms(void);
/* Reads a small file (/proc, /sys) into buf as a string; its length, or -1. */
ssize_t read_small(const char *path, char *buf, size_t size);
void alog(const char *fmt, ...);

/* wire.c: frames, the output queue and its hold, replies, request fields */
void put_le32(uint8_t *p, uint32_t v);
uint32_t get_le32(const uint8_t *p);
void send_frame(uint32_t id, uint8_t kind, uint8_t chan, uint8_t flags, const void *p, size_t n);
void send_json(uint32_t id, uint8_t kind, jbuf *b);
void send_error(uint32_t id, const char *code, const char *fmt, ...);
void send_errno(uint32_t id, int err, const char *what);
void send_ok(uint32_t id);
void send_window(uint32_t id, uint8_t chan, uint32_t n);
const char *errno_code(int err);
size_t outq_bytes(void);
int outq_waiting(void); /* frames wait and no hold stops them */
int outq_held(void);
void outq_release(void);
void outq_hold_last(void);
void outq_flush(int fd);
void outq_clear(void);
void outq_each_data(void (*fn)(uint32_t id, uint8_t chan, const uint8_t *p, size_t n));
void outq_tail_to_front(void); /* the frame queued last (a HELLO) goes out first */
char *req_str(const jdoc *d, const char *key);
int req_int(const jdoc *d, const char *key, int64_t def, int64_t *out);
int req_bool(const jdoc *d, const char *key, int def);

/* sessions.c: streams in flight and the epoll set */
void watch_fd(int fd, uint32_t events, void *ptr);
void unwatch_fd(int fd);
sess *sess_find(uint32_t id);
sess *sess_new(uint32_t id, enum sess_type t);
void sess_free(sess *s);
int sess_buffer_input(sess *s, const uint8_t *p, size_t n);
extern sess *sessions;
extern int epfd;

/* exec.c */
void op_exec(uint32_t id, const jdoc *d);
void op_signal(uint32_t id, const jdoc *d);
void op_resize(uint32_t id, const jdoc *d);
void exec_on_fd(sess *s, int which, uint32_t events);
void exec_on_data(sess *s, const uint8_t *p, size_t n, int eof);
void exec_on_window(sess *s, uint8_t chan, uint32_t n);
void exec_reap(pid_t pid, int status);
void exec_tick(sess *s, uint64_t now);
void exec_detach(sess *s);
void exec_keep_queued(uint32_t id, uint8_t chan, const uint8_t *p, size_t n); /* output a gone host never got, kept (drop_sessions) */
uint64_t exec_next_deadline(sess *s);
int exec_detached_count(void);
void exec_cgroup(char *out, size_t size, pid_t pid, const char *file);
void exec_cgroup_kill(pid_t pid);
void op_killall(uint32_t id, const jdoc *d);
void op_procs(uint32_t id, const jdoc *d);
void op_adopt(uint32_t id, const jdoc *d);

/* files.c */
void op_write(uint32_t id, const jdoc *d);
void write_on_data(sess *s, const uint8_t *p, size_t n, int eof);
void op_read(uint32_t id, const jdoc *d);
int read_pump(sess *s); /* returns 1 while more can be sent right away */
void op_stat(uint32_t id, const jdoc *d);
void op_list(uint32_t id, const jdoc *d);
void op_mkdir(uint32_t id, const jdoc *d);
void op_remove(uint32_t id, const jdoc *d);
void op_move(uint32_t id, const jdoc *d);
void op_chmod(uint32_t id, const jdoc *d);
void op_symlink(uint32_t id, const jdoc *d);
void op_sync(uint32_t id, const jdoc *d);
void op_freeze(uint32_t id, const jdoc *d);
void op_glob(uint32_t id, const jdoc *d);
int mkdir_parents(const char *path, mode_t mode);
int mkdir_owned(const char *path, mode_t mode, int64_t uid, int64_t gid);

/* net.c: TCP tunnels between host streams and guest sockets */
void op_listen(uint32_t id, const jdoc *d);
void op_connect(uint32_t id, const jdoc *d);
void op_close(uint32_t id, const jdoc *d);
void net_on_fd(sess *s, uint32_t events);
void net_on_data(sess *s, const uint8_t *p, size_t n, int eof);
void net_on_window(sess *s, uint32_t n);
void net_tick(sess *s, uint64_t now);
void net_drop_pending(void);

/* guard.c: ends the process group that filled the sandbox's task limit */
int pids_guard_fd(void);
void pids_guard_check(void);

/* watch.c: inotify on directories, changes as events */
void op_watch(uint32_t id, const jdoc *d);
void watch_on_fd(sess *s);
void watch_tick(sess *s);

/* share.c: host directories as FUSE mounts served over a stream */
void op_share(uint32_t id, const jdoc *d);
void share_on_fd(sess *s);
void share_on_data(sess *s, const uint8_t *p, size_t n, int eof);
void share_on_window(sess *s, uint32_t n);
void share_tick(sess *s);

/* system.c */
void op_metrics(uint32_t id, const jdoc *d);
void op_configure(uint32_t id, const jdoc *d);
void op_mount(uint32_t id, const jdoc *d);
void op_shutdown(uint32_t id, const jdoc *d);
void boot_init(void);
void power_off(void);
void read_cmdline(void);
const char *cmdline_get(const char *key, char *out, size_t outsz);
void mount_fs(const char *src, const char *dst, const char *type, unsigned long fl, const char *opt);
int write_str(const char *path, const char *v);
int set_hostname(const char *name);
/* The cgroup of every exec'd process: /sys/fs/cgroup/sandbox, or under the agent's own
 * delegated cgroup when systemd runs the agent (systemd.c). */
extern char sandbox_cgroup[160];
char *sandbox_file(char *out, size_t size, const char *file); /* exec.c: a file of that cgroup, in out */
/* systemd.c: a system image's boot, where systemd is PID 1 and the agent its service */
void systemd_handover(void);
void service_init(void);
extern int service_mode;
extern int shutdown_requested;
/* Set by "--fd N": the host channel is an inherited socket and there is no VM (local provider). */
extern int host_fd_mode;

/* dispatch.c: requests, the operation table, HELLO */
void dispatch(uint32_t id, const uint8_t *p, size_t n);
void op_hello(uint32_t id, const char *nonce); /* id 0: the agent's own HELLO frame */
void op_hello_as(uint32_t id, const char *nonce, int continued); /* continued: streams carried over */
void op_hold(uint32_t id, const jdoc *d);
/* reclaim.c */
void op_reclaim(uint32_t id, const jdoc *d);
void reclaim_end(void);
#endif
