/* Tests of the agent's JSON reader and writer: known documents, then random and mutated input
 * under AddressSanitizer and UBSan. Any crash, leak or out-of-bounds access fails the run. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

static void known(void) {
  const char *src = "{\"op\":\"exec\",\"argv\":[\"a\",\"b\\n\\u00e9\\ud83d\\ude00\"],\"env\":{\"K\":\"V\"},\"timeout_ms\":1500,\"pty\":{\"rows\":30},\"stdin\":true}";
  jdoc d;
  assert(json_parse(&d, src, (int)strlen(src), 256) == 0);
  char *op = json_strdup(&d, json_get(&d, 0, "op"), NULL);
  assert(op && !strcmp(op, "exec"));
  free(op);
  int argv = json_get(&d, 0, "argv");
  assert(argv > 0 && d.toks[argv].type == J_ARR && d.toks[argv].size == 2);
  char *second = json_strdup(&d, json_skip(&d, argv + 1), NULL);
  assert(second && !strcmp(second, "b\n\xc3\xa9\xf0\x9f\x98\x80"));
  free(second);
  int64_t v;
  assert(json_int(&d, json_get(&d, 0, "timeout_ms"), &v) == 0 && v == 1500);
  assert(json_int(&d, json_get(&d, json_get(&d, 0, "pty"), "rows"), &v) == 0 && v == 30);
  assert(json_bool(&d, json_get(&d, 0, "stdin")) == 1);
  assert(json_get(&d, 0, "missing") == -1);
  json_free(&d);

  const char *bad[] = {"", "{", "{\"a\":}", "[1,]", "{\"a\" 1}", "\"\\x\"", "{\"a\":1}x", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "\"a\x01\"", "tru", "{\"a\":\"\\u12\"}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert(json_parse(&d, bad[i], (int)strlen(bad[i]), 256) < 0);
    json_free(&d);
  }

  jbuf b;
  jb_init(&b);
  jb_str(&b, "q\"\\\n\x01\x7f", 6);
  assert(!strcmp(b.buf, "\"q\\\"\\\\\\n\\u0001\\u007f\""));
  jb_free(&b);
}

static unsigned rng = 12345;
static unsigned rnd(void) { rng = rng * 1103515245u + 12345u; return rng >> 8; }

static void walk(jdoc *d) {
  /* Exercise every accessor on whatever parsed. */
  for (int i = 0; i < d->ntok; i++) {
    char *s = json_strdup(d, i, NULL);
    free(s);
    int64_t v;
    json_int(d, i, &v);
    json_bool(d, i);
    json_get(d, i, "op");
    json_skip(d, i);
  }
}

static void fuzz(void) {
  const char *seeds[] = {"{\"op\":\"write\",\"path\":\"/a\",\"mode\":420}", "{\"a\":[1,2,{\"b\":\"\\u0041\"}],\"c\":null}", "[true,false,-1.5e3]"};
  char buf[512];
  for (int round = 0; round < 200000; round++) {
    int n;
    if (round % 2) {
      const char *s = seeds[rnd() % 3];
      n = (int)strlen(s);
      memcpy(buf, s, (size_t)n);
      for (int k = 0, m = 1 + rnd() % 4; k < m; k++) {
        int at = (int)(rnd() % (unsigned)n);
        switch (rnd() % 3) {
          case 0: buf[at] = (char)rnd(); break;
          case 1: if (n > 1) { memmove(buf + at, buf + at + 1, (size_t)(n - at - 1)); n--; } break;
          default: if (n < (int)sizeof buf - 1) { memmove(buf + at + 1, buf + at, (size_t)(n - at)); buf[at] = "{}[]\":,\\u0"[rnd() % 11]; n++; }
        }
      }
    } else {
      n = (int)(rnd() % 64);
      for (int k = 0; k < n; k++) buf[k] = "{}[]\":,\\ue0atrn1-."[rnd() % 18];
    }
    char *copy = malloc((size_t)n + 1); /* exact size, so ASan sees any over-read */
    memcpy(copy, buf, (size_t)n);
    jdoc d;
    if (json_parse(&d, copy, n, 64) == 0) walk(&d);
    json_free(&d);
    free(copy);
  }
}

int main(void) {
  known();
  fuzz();
  printf("agent json: known documents and 200000 fuzzed inputs ok\n");
  return 0;
}
