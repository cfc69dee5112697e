/* The floor of open-loop sending on this machine, for bench/load.sh: the least
 * a client can spend per request when requests go out one at a time at a
 * fixed rate. One keep-alive connection (TCP_NODELAY), blocking I/O, each
 * request sent at its due time after an absolute clock_nanosleep, its reply
 * read whole before the next; nothing else. Between requests the thread
 * sleeps, so each request costs the two wake-ups an open loop cannot avoid
 * at rates where requests do not overlap (its due time, its reply).
 *
 *   cc -O2 -o pace-floor bench/pace-floor.c
 *   ./pace-floor PORT RATE SECONDS BODY_JSON
 *
 * Prints "requests cpu_seconds late_over_1ms". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
  perror(what);
  exit(1);
}

/* Reads one HTTP response with a Content-Length body; 0 when the server
 * closed the connection. */
static int read_response(int fd, char *buf, size_t cap) {
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, cap - have - 1);
    if (n <= 0) return 0;
    have += (size_t)n;
    buf[have] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end) continue;
    char *cl = strcasestr(buf, "content-length:");
    if (!cl || cl > end) die("a response without content-length");
    size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10);
    while (have < want) {
      n = read(fd, buf + have, cap - have - 1);
      if (n <= 0) return 0;
      have += (size_t)n;
    }
    return 1;
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s PORT RATE SECONDS BODY_JSON\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[1]);
  double rate = atof(argv[2]), secs = atof(argv[3]);
  const char *body = argv[4];
  char req[65536];
  int len = snprintf(req, sizeof req,
                     "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n"
                     "content-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
                     port, strlen(body), body);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");

  prctl(PR_SET_TIMERSLACK, 1UL); /* wake on time, as batchbench's timerfd does */
  static char buf[1 << 20];
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long n = (long)(rate * secs), late = 0;
  double gap_ns = 1e9 / rate;
  for (long i = 0; i < n; i++) {
    double at = (double)start.tv_nsec + gap_ns * (double)(i + 1);
    struct timespec due = {.tv_sec = start.tv_sec + (time_t)(at / 1e9),
                           .tv_nsec = (long)(at - 1e9 * (double)(time_t)(at / 1e9))};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - due.tv_sec) * 1000000000L + (now.tv_nsec - due.tv_nsec) > 1000000L) late++;
    if (write(fd, req, (size_t)len) != len) die("write");
    if (!read_response(fd, buf, sizeof buf)) die("the server closed the connection");
  }
  getrusage(RUSAGE_SELF, &r1);
  double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
               (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
  printf("%ld %.6f %ld\n", n, cpu, late);
  return 0;
}
