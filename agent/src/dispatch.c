/* Requests: the table of operations, HELLO (which advertises the table's
 * features), and dispatch of one request to its handler under the identity it asks for. */
#define _GNU_SOURCE
#include "agent.h"

#include <sys/fsuid.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* hold {on}: with on (the default) the reply is the last frame written until the hold ends, so
 * once the host has it, it has everything this agent sent; on:false ends a hold (a save that
 * failed). Feature continue-sessions. */
void op_hold(uint32_t id, const jdoc *d) {
  int on = req_bool(d, "on", 1);
  if (!on) outq_release();
  send_ok(id);
  if (on) outq_hold_last();
}

static void op_hello_req(uint32_t id, const jdoc *d) { (void)d; op_hello(id, NULL); }
static void op_ping(uint32_t id, const jdoc *d) { (void)d; send_ok(id); }

/* Every operation in one table: its name, its handler, whether it runs with the filesystem
 * identity the host names (as_uid/as_gid), and the feature HELLO advertises for it. The host
 * keeps the same table (src/agent-client/features.ts) and a test compares the two. */
typedef void (*op_fn)(uint32_t id, const jdoc *d);
static const struct op {
  const char *name;
  op_fn fn;
  int as_user;
  const char *feature;
} OPS[] = {
    {"hello", op_hello_req, 0, "exec"},     {"ping", op_ping, 0, "exec"},        {"exec", op_exec, 0, "exec"},
    {"signal", op_signal, 0, "exec"},       {"resize", op_resize, 0, "pty"},     {"shutdown", op_shutdown, 0, "exec"},
    {"write", op_write, 1, "files"},        {"read", op_read, 1, "files"},       {"stat", op_stat, 1, "files"},
    {"list", op_list, 1, "files"},          {"mkdir", op_mkdir, 1, "files"},     {"remove", op_remove, 1, "files"},
    {"move", op_move, 1, "files"},          {"chmod", op_chmod, 1, "files"},     {"glob", op_glob, 1, "glob"},
    {"metrics", op_metrics, 0, "metrics"},  {"configure", op_configure, 0, "configure"},
    {"listen", op_listen, 0, "tcp"},        {"connect", op_connect, 0, "tcp"},   {"close", op_close, 0, "tcp"},
    {"watch", op_watch, 1, "watch"},
    {"symlink", op_symlink, 1, "archive"},  {"sync", op_sync, 0, "archive"},
    {"freeze", op_freeze, 0, "commit"},     {"mount", op_mount, 0, "volumes"},
    {"share", op_share, 0, "host-dirs"},    {"hold", op_hold, 0, "continue-sessions"},
    {"reclaim", op_reclaim, 0, "reclaim"},
    {"procs", op_procs, 0, "adopt"},        {"adopt", op_adopt, 0, "adopt"},     {"killall", op_killall, 0, "killall"},
};
#define N_OPS (sizeof OPS / sizeof OPS[0])

/* Features that belong to a field rather than an operation: the host's HELLO ("host-hello"),
 * processes that survive it ("keep-processes"), a network device set up by configure ("nic"),
 * close of a read or write stream ("close-transfers"), directories made for another user
 * (mkdir's "uid"/"gid", "owned-dirs"), a listener on a unix socket (listen's "path", "unix-listen"). */
static const char *const FIELD_FEATURES[] = {"host-hello", "keep-processes", "nic", "close-transfers", "owned-dirs", "unix-listen"};

void op_hello(uint32_t id, const char *nonce) { op_hello_as(id, nonce, 0); }

void op_hello_as(uint32_t id, const char *nonce, int continued) {
  jbuf b;
  jb_init(&b);
  jb_cstr(&b, "{\"ok\":true,\"proto\":");
  jb_int(&b, PROTO_VERSION);
  jb_cstr(&b, ",\"agent\":\"" AGENT_VERSION "\",\"pid\":");
  jb_int(&b, getpid());
  if (nonce) {
    jb_cstr(&b, ",\"nonce\":");
    jb_str(&b, nonce, strlen(nonce));
  }
  if (continued) jb_cstr(&b, ",\"continued\":true");
  /* processes a host that went away left running: a new host lists them (procs) only when there are some */
  int detached = exec_detached_count();
  if (detached) { jb_cstr(&b, ",\"detached\":"); jb_int(&b, detached); }
  jb_cstr(&b, ",\"features\":[");
  int first = 1;
  for (size_t i = 0; i < N_OPS; i++) {
    size_t j = 0;
    while (j < i && strcmp(OPS[j].feature, OPS[i].feature)) j++;
    if (j < i) continue; /* listed already */
    if (!first) jb_cstr(&b, ",");
    jb_str(&b, OPS[i].feature, strlen(OPS[i].feature));
    first = 0;
  }
  for (size_t i = 0; i < sizeof FIELD_FEATURES / sizeof FIELD_FEATURES[0]; i++) {
    jb_cstr(&b, ",");
    jb_str(&b, FIELD_FEATURES[i], strlen(FIELD_FEATURES[i]));
  }
  jb_cstr(&b, "]}");
  send_json(id, id ? K_RES : K_HELLO, &b);
  jb_free(&b);
}

/* File operations run with the filesystem identity the host asks for ("as_uid"/"as_gid"), so
 * that the kernel's permission checks confine them as they would that user's own programs: the
 * agent is root, and a pool tenant must not reach another tenant's files through it. */
static void run_as(uint32_t id, const struct op *o, const jdoc *d) {
  int64_t as_uid, as_gid;
  req_int(d, "as_uid", -1, &as_uid);
  req_int(d, "as_gid", as_uid, &as_gid);
  if (as_uid > 65535 * 65536LL || as_gid > 65535 * 65536LL) { send_error(id, "EINVAL", "\"as_uid\" is out of range"); return; }
  if (as_uid >= 0) {
    setfsgid((gid_t)as_gid);
    setfsuid((uid_t)as_uid);
  }
  o->fn(id, d);
  if (as_uid >= 0) {
    /* a write stream finishes (rename) later, under the same identity */
    sess *s = sess_find(id);
    if (s && s->type == S_WRITE) {
      s->as_uid = (int64_t)as_uid;
      s->as_gid = (int64_t)as_gid;
    }
    setfsuid(0);
    setfsgid(0);
  }
}

void dispatch(uint32_t id, const uint8_t *p, size_t n) {
  jdoc d;
  if (json_parse(&d, (const char *)p, (int)n, 4096) < 0 || d.toks[0].type != J_OBJ) {
    json_free(&d);
    send_error(id, "EPROTO", "malformed request: expected a JSON object");
    return;
  }
  char *op = req_str(&d, "op");
  const struct op *o = NULL;
  for (size_t i = 0; op && i < N_OPS && !o; i++)
    if (!strcmp(op, OPS[i].name)) o = &OPS[i];
  if (!op) send_error(id, "EPROTO", "request has no \"op\" string");
  else if (sess_find(id)) send_error(id, "EPROTO", "request id %u is already in flight", id);
  else if (!o) send_error(id, "ENOSYS", "unknown op \"%.64s\"", op);
  else if (o->as_user) run_as(id, o, &d);
  else o->fn(id, &d);
  free(op);
  json_free(&d);
}
