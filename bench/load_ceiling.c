/* The physical limits beside tensorsafe.load in bench/load_bench.py, built
 * there with `cc -O2 -pthread` at run time.
 *
 *   load_ceiling evict FILE        fdatasync + posix_fadvise(DONTNEED) on FILE
 *                                  only, then prints the fraction of its pages
 *                                  still resident (mincore)
 *   load_ceiling resident FILE     that fraction only
 *   load_ceiling prefault FILE     O_DIRECT, 4 MiB requests, 8 in flight, into a
 *                                  2 MiB-aligned MADV_HUGEPAGE buffer faulted in
 *                                  before the clock starts
 *   load_ceiling fresh FILE        the same into fresh memory that a helper
 *                                  thread faults in just ahead of the reads
 *   load_ceiling fresh4k FILE      the same with 4 KiB pages (no
 *                                  MADV_HUGEPAGE): requests split at the
 *                                  device, but where the host took the VM's
 *                                  free memory back 2 MiB pages fault slower
 *   load_ceiling memcpy FILE       memcpy of the file's size between two
 *                                  pre-faulted buffers (the warm ceiling)
 *
 * Prints one JSON line: {"seconds": s, "cpu": s, "bytes": n} (or "resident").
 *
 * Built a second time with -shared -fPIC for ts_touch, which the loading
 * processes call through ctypes to touch what they loaded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REQ (4u << 20)
#define DEPTH 8
#define HUGE (2u << 20)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double resident(const char* path) {
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return -1;
  size_t pages = (st.st_size + 4095) / 4096;
  if (pages == 0) return 0;
  void* m = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  unsigned char* v = malloc(pages);
  mincore(m, st.st_size, v);
  size_t in = 0;
  for (size_t i = 0; i < pages; ++i) in += v[i] & 1;
  munmap(m, st.st_size);
  free(v);
  close(fd);
  return (double)in / pages;
}

static unsigned char* buffer(size_t size, int huge) {
  unsigned char* p = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  unsigned char* b = (unsigned char*)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
  if (huge) madvise(b, size, MADV_HUGEPAGE);
  return b;
}

struct job {
  int fd;
  size_t size;
  unsigned char* buf;
  atomic_size_t next;
  atomic_size_t faulted;  /* bytes of buf faulted in by the helper */
};

static void* faulter(void* arg) {
  struct job* j = arg;
  for (size_t at = 0; at < j->size; at += HUGE) {
    size_t end = at + HUGE < j->size ? at + HUGE : j->size;
    for (size_t p = at; p < end; p += 4096) j->buf[p] = 0;
    atomic_store(&j->faulted, end);
  }
  return NULL;
}

static void* reader(void* arg) {
  struct job* j = arg;
  for (;;) {
    size_t off = atomic_fetch_add(&j->next, REQ);
    if (off >= j->size) return NULL;
    size_t end = off + REQ < j->size ? off + REQ : j->size;
    while (atomic_load(&j->faulted) < end) sched_yield();
    size_t want = (end - off + 4095) & ~(size_t)4095;
    if (pread(j->fd, j->buf + off, want, off) < 0) {
      perror("pread");
      exit(1);
    }
  }
}

/* Reads one byte of every 4 KiB page of [p, p + n): faults mapped pages in
 * at the cost of a C loop, not a Python call per page. */
uint64_t ts_touch(const volatile unsigned char* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; i += 4096) s += p[i];
  if (n) s += p[n - 1];
  return s;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: load_ceiling evict|resident|prefault|fresh|fresh4k|memcpy FILE\n");
    return 2;
  }
  const char* mode = argv[1];
  const char* path = argv[2];
  if (!strcmp(mode, "evict") || !strcmp(mode, "resident")) {
    if (!strcmp(mode, "evict")) {
      int fd = open(path, O_RDONLY);
      if (fd < 0) return perror(path), 1;
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
    printf("{\"resident\": %.4f}\n", resident(path));
    return 0;
  }
  struct stat st;
  if (stat(path, &st) != 0) return perror(path), 1;
  size_t size = st.st_size;
  unsigned char* buf = buffer(size + REQ, strcmp(mode, "fresh4k") != 0);
  if (!buf) return perror("mmap"), 1;
  if (!strcmp(mode, "memcpy")) {
    unsigned char* src = buffer(size, 1);
    memset(src, 1, size);
    memset(buf, 0, size);
    double c0 = cpu(), t0 = now();
    memcpy(buf, src, size);
    printf("{\"seconds\": %.6f, \"cpu\": %.6f, \"bytes\": %zu}\n", now() - t0, cpu() - c0, size);
    return 0;
  }
  int fresh = !strcmp(mode, "fresh") || !strcmp(mode, "fresh4k");
  if (!fresh) memset(buf, 0, size + REQ);
  struct job j = {.size = size, .buf = buf};
  atomic_init(&j.next, 0);
  atomic_init(&j.faulted, fresh ? 0 : size + REQ);
  double c0 = cpu(), t0 = now();
  j.fd = open(path, O_RDONLY | O_DIRECT);
  if (j.fd < 0) return perror(path), 1;
  pthread_t f, r[DEPTH];
  if (fresh) pthread_create(&f, NULL, faulter, &j);
  for (int i = 0; i < DEPTH; ++i) pthread_create(&r[i], NULL, reader, &j);
  for (int i = 0; i < DEPTH; ++i) pthread_join(r[i], NULL);
  if (fresh) pthread_join(f, NULL);
  double t = now() - t0;
  printf("{\"seconds\": %.6f, \"cpu\": %.6f, \"bytes\": %zu}\n", t, cpu() - c0, size);
  return 0;
}
