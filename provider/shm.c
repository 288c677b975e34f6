/* The queue segments the daemon makes: memfds it seals against resizing and hands to the driver
 * at its segment desk, a Unix socket beside its consumer socket (docs/host-interface.md 2).
 * Nothing is opened by name: one request per connection, the descriptor by SCM_RIGHTS. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "df.h"

#define DESK_TIMEOUT_S 10 /* one request, one small reply */

/* "datfabric-<ia name>-<kind><handle>", e.g. -eq3 or -wq7 (docs/host-interface.md 2, 6). */
void df_segment_name(char *out, size_t size, const struct df_ia *ia, const char *kind,
		     uint32_t handle)
{
	snprintf(out, size, "datfabric-%s-%s%u", ia->name, kind, handle);
}

static int desk_connect(const struct df_ia *ia)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.seg", ia->prov->socket_path);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return -1;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = {.tv_sec = DESK_TIMEOUT_S};
	if (s >= 0 && (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
		       connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)) {
		close(s);
		s = -1;
	}
	return s;
}

/* SEGMENT_GET(ia, segment): the descriptor the daemon attached to its answer, or -1 (it
 * answered ERROR, or went away). The first read holds the descriptor: the reply is small. */
static int desk_fetch(const struct df_ia *ia, const char *segment)
{
	int s = desk_connect(ia);
	if (s < 0)
		return -1;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	df_frame_begin(&sb, &pk, DF_FRAME_SEGMENT_GET, 2);
	msgpack_pack_str_with_body(&pk, ia->name, strlen(ia->name));
	msgpack_pack_str_with_body(&pk, segment, strlen(segment));
	uint32_t hlen = (uint32_t)(sb.size - 4);
	uint8_t *p = (uint8_t *)sb.data;
	p[0] = (uint8_t)(hlen >> 24), p[1] = (uint8_t)(hlen >> 16);
	p[2] = (uint8_t)(hlen >> 8), p[3] = (uint8_t)hlen;
	bool sent = send(s, sb.data, sb.size, MSG_NOSIGNAL) == (ssize_t)sb.size;
	msgpack_sbuffer_destroy(&sb);
	int fd = -1;
	uint8_t reply[512];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = {.iov_base = reply, .iov_len = sizeof(reply)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	if (sent && recvmsg(s, &msg, MSG_CMSG_CLOEXEC) > 5) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		/* the header is an array [type, 0, ...]: its type is the byte after the array tag */
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int))) {
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
			if (reply[5] != DF_FRAME_SEGMENT) {
				close(fd);
				fd = -1;
			}
		}
	}
	close(s);
	return fd;
}

/* Map a whole segment of the IA read-write; NULL if it cannot be (the desk refused, or it is
 * smaller than a ring header). */
void *df_shm_map(const struct df_ia *ia, const char *name, size_t *len)
{
	int fd = desk_fetch(ia, name);
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
