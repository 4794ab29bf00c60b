/* git-credential-forgevm: the guest's end of git credential forwarding (docs/security.md,
 * "Credential forwarding"). git runs it as a credential helper (`git-credential-forgevm get`,
 * the request's attributes on stdin); it hands the action and the request to the host through
 * the unix socket the agent listens on for the sandbox, and prints the host's answer. The host
 * decides everything: which actions it serves (only `get`), for which hosts, with what.
 *
 * Static and self-contained like the agent, so it runs on any image that has git. When nothing
 * answers (forwarding is off, or the sandbox was restored where it is not asked for) it prints
 * nothing and exits 0: to git, a helper that knows no credential. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_PATH "/run/forgevm/git-credential.sock"
#define MAX_REQUEST 65536

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    static const char usage[] = "usage: git-credential-forgevm get|store|erase (git runs it as a credential helper)\n";
    write_all(2, usage, sizeof usage - 1);
    return 2;
  }
  /* git expects the helper to read its whole request, whatever it answers. */
  static char req[MAX_REQUEST];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(0, req + len, sizeof req - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    if (len == sizeof req) return 0; /* larger than any request git sends: not ours to answer */
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  strcpy(sa.sun_path, SOCKET_PATH);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) return 0;
  const char *action = argv[1];
  if (write_all(fd, "action=", 7) < 0 || write_all(fd, action, strlen(action)) < 0 || write_all(fd, "\n", 1) < 0 || write_all(fd, req, len) < 0) return 0;
  shutdown(fd, SHUT_WR);
  char buf[4096];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (write_all(1, buf, (size_t)r) < 0) return 1;
  }
  return 0;
}
