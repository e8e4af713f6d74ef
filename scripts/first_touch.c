// How fast this machine backs memory on first touch (docs/bench.md "First-touch page
// faults"): a fresh file of MB mebibytes on a tmpfs, mapped shared, faulted in either by one
// MADV_POPULATE_WRITE call or, with a third argument, by writing one byte per 4 KiB page.
//   cc -O2 -o /tmp/first_touch scripts/first_touch.c
//   /tmp/first_touch /mnt/pmhuge/x 1024; /tmp/first_touch /mnt/pmhuge/x 1024 touch
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s FILE MB [touch]\n", argv[0]);
    return 2;
  }
  size_t n = (size_t)atol(argv[2]) << 20;
  int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) return 1;
  char* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 1;
  double t = now();
  if (argc > 3)
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  else if (madvise(p, n, 23 /* MADV_POPULATE_WRITE */) != 0)
    return 1;
  double s = now() - t;
  printf("%s %zu MiB: %.3f s = %.2f GB/s\n", argv[1], n >> 20, s, (double)n / 1e9 / s);
  unlink(argv[1]);
  return 0;
}
