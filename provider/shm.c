/* The queue segments the daemon places in /dev/shm and the driver maps. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "df.h"

/* "/datfabric-<ia name>-<kind><handle>", e.g. -eq3 or -wq7 (docs/host-interface.md 2, 6). */
void df_segment_name(char *out, size_t size, const struct df_ia *ia, const char *kind,
		     uint32_t handle)
{
	snprintf(out, size, "/datfabric-%s-%s%u", ia->name, kind, handle);
}

/* Map a whole segment read-write; NULL if it cannot be (no such segment, or smaller than a
 * ring header). O_NOFOLLOW: a name in /dev/shm that is a link is not ours. */
void *df_shm_map(const char *name, size_t *len)
{
	int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	struct stat st;
	void *base = MAP_FAILED;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct df_ring_hdr)) {
		*len = (size_t)st.st_size;
		base = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	}
	close(fd);
	return base == MAP_FAILED ? NULL : base;
}

void df_shm_unmap(void *base, size_t len)
{
	if (base)
		munmap(base, len);
}
