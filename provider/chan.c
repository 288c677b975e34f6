/* The control path: one Unix stream per IA carrying msgpack frames (docs/host-interface.md).
 *
 * Frames are a 4-byte big-endian length, then the msgpack header [type, payload_len, *fields].
 * Any thread may need input (a reply to its call, a NOTIFY for its wait); the first one in reads
 * the socket for all of them and wakes the others when a frame arrives (leader and followers),
 * so no two threads ever read the socket at once and no thread sleeps on input another one took. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "df.h"

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* The daemon is gone or broke the protocol (lock held): every waiter wakes, every later call
 * gives DAT_ABORT. The reason goes to stderr once, as the IA's only trace of why. */
void df_chan_kill(struct df_chan *ch, const char *reason)
{
	if (!ch->dead) {
		ch->dead = true;
		fprintf(stderr, "libdatfabric: IA lost: %s\n", reason);
	}
	pthread_cond_broadcast(&ch->cond);
}

bool df_chan_dead(struct df_chan *ch)
{
	pthread_mutex_lock(&ch->lock);
	bool dead = ch->dead;
	pthread_mutex_unlock(&ch->lock);
	return dead;
}

/* Write one whole frame (length prefix included); a failed write means the daemon is gone. */
static bool send_all(struct df_chan *ch, const uint8_t *buf, size_t len)
{
	pthread_mutex_lock(&ch->write_lock);
	while (len) {
		ssize_t n = send(ch->fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf += n;
		len -= (size_t)n;
	}
	pthread_mutex_unlock(&ch->write_lock);
	return len == 0;
}

/* Send a whole frame whose first 4 bytes are reserved for the length, the IA's lock held. */
void df_send_bytes_locked(struct df_chan *ch, uint8_t *frame, size_t len)
{
	put_be32(frame, (uint32_t)(len - 4));
	if (!send_all(ch, frame, len))
		df_chan_kill(ch, "the daemon's socket refused a frame");
}

/* Send the frame in ``sb`` (its first 4 bytes reserved for the length). */
bool df_send_frame(struct df_chan *ch, msgpack_sbuffer *sb)
{
	put_be32((uint8_t *)sb->data, (uint32_t)(sb->size - 4));
	if (send_all(ch, (const uint8_t *)sb->data, sb->size))
		return true;
	pthread_mutex_lock(&ch->lock);
	df_chan_kill(ch, "the daemon's socket refused a frame");
	pthread_mutex_unlock(&ch->lock);
	return false;
}

void df_frame_begin(msgpack_sbuffer *sb, msgpack_packer *pk, enum df_frame type, size_t fields)
{
	msgpack_sbuffer_init(sb);
	msgpack_sbuffer_write(sb, "\0\0\0\0", 4);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(pk, 2 + fields);
	msgpack_pack_unsigned_int(pk, type);
	msgpack_pack_unsigned_int(pk, 0); /* payload_len: the control path carries none */
}

/* One frame from the daemon (lock held): a REPLY is kept for its caller (df_call), a NOTIFY
 * only woke the reader. Anything else but HELLO, or a header of the wrong shape, means the
 * daemon broke the protocol: the IA is lost. */
static void take_frame(struct df_chan *ch, const uint8_t *hdr, uint32_t len)
{
	msgpack_unpacked msg;
	msgpack_unpacked_init(&msg);
	size_t off = 0;
	const msgpack_object *f = NULL;
	uint32_t n = 0;
	if (msgpack_unpack_next(&msg, (const char *)hdr, len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    msg.data.type == MSGPACK_OBJECT_ARRAY && msg.data.via.array.size >= 2 &&
	    msg.data.via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		f = msg.data.via.array.ptr;
		n = msg.data.via.array.size;
	}
	uint64_t type = f ? f[0].via.u64 : 0;
	if (type == DF_FRAME_REPLY && n == 6 && f[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		df_keep_reply(ch, f[2].via.u64, hdr, len);
	else if (type == DF_FRAME_ERROR && n == 3 && f[2].type == MSGPACK_OBJECT_STR) {
		static const char limit[] = "DAT_INSUFFICIENT_RESOURCES";
		char why[128];
		snprintf(why, sizeof(why), "daemon reported: %.*s", (int)f[2].via.str.size,
			 f[2].via.str.ptr);
		ch->refused = memmem(f[2].via.str.ptr, f[2].via.str.size, limit,
				     sizeof(limit) - 1) != NULL;
		df_chan_kill(ch, why);
	} else if (type != DF_FRAME_NOTIFY && type != DF_FRAME_HELLO)
		df_chan_kill(ch, "a frame the daemon may not send");
	msgpack_unpacked_destroy(&msg);
}

/* Split the bytes read so far into frames (lock held). */
static void parse_input(struct df_chan *ch)
{
	size_t at = 0;
	while (!ch->dead && ch->in_len - at >= 4) {
		const uint8_t *p = ch->in + at;
		uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
		if (len == 0 || len > DF_MAX_HEADER_LEN) {
			df_chan_kill(ch, "a frame header of impossible length");
			break;
		}
		if (ch->in_len - at - 4 < len)
			break;
		take_frame(ch, p + 4, len);
		at += 4 + (size_t)len;
	}
	memmove(ch->in, ch->in + at, ch->in_len - at);
	ch->in_len -= at;
}

static int ms_until(const struct timespec *deadline)
{
	if (!deadline)
		return -1;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t ms = (deadline->tv_sec - now.tv_sec) * 1000 + (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms + 1;
}

/* Wait for input until ``deadline`` (NULL: no limit), with the lock held on entry and exit.
 * Returns after a frame arrived, the deadline passed, or the daemon died. */
bool df_pump_locked(struct df_chan *ch, const struct timespec *deadline)
{
	if (ch->dead)
		return false;
	if (ch->reading) { /* a follower: the reader broadcasts what it reads */
		if (deadline)
			pthread_cond_timedwait(&ch->cond, &ch->lock, deadline);
		else
			pthread_cond_wait(&ch->cond, &ch->lock);
		return true;
	}
	ch->reading = true;
	if (ch->in_cap - ch->in_len < 65536) {
		size_t cap = ch->in_len + 65536 + 4 + DF_MAX_HEADER_LEN;
		uint8_t *in = realloc(ch->in, cap);
		if (!in) {
			ch->reading = false;
			df_chan_kill(ch, "out of memory reading the socket");
			return false;
		}
		ch->in = in;
		ch->in_cap = cap;
	}
	uint8_t *dst = ch->in + ch->in_len;
	size_t room = ch->in_cap - ch->in_len;
	pthread_mutex_unlock(&ch->lock);
	struct pollfd pfd[2] = { { .fd = ch->fd, .events = POLLIN },
				 { .fd = ch->wake_fd, .events = POLLIN } };
	ssize_t got = -2;
	if (poll(pfd, 2, ms_until(deadline)) > 0) {
		uint64_t wakes;
		if (pfd[1].revents & POLLIN && read(ch->wake_fd, &wakes, sizeof(wakes)) < 0)
			wakes = 0;
		if (pfd[0].revents)
			got = recv(ch->fd, dst, room, MSG_DONTWAIT);
	}
	pthread_mutex_lock(&ch->lock);
	ch->reading = false;
	if (got == 0 || (got < 0 && got != -2 && errno != EINTR && errno != EAGAIN))
		df_chan_kill(ch, "the daemon closed the IA's socket");
	else if (got > 0) {
		ch->in_len += (size_t)got;
		parse_input(ch);
	}
	pthread_cond_broadcast(&ch->cond);
	return got > 0;
}

/* Wake every thread waiting for input (the reader too): a wait must look at its EVD again. */
void df_chan_interrupt(struct df_chan *ch)
{
	uint64_t one = 1;
	pthread_cond_broadcast(&ch->cond);
	if (write(ch->wake_fd, &one, sizeof(one)) < 0)
		return; /* the counter is full: a wake-up is pending anyway */
}

/* The daemon reaches registered memory with cross-memory attach (docs/provider.md): where
 * Yama restricts ptrace to ancestors, name the daemon at the other end of the socket as this
 * process's ptracer. Without Yama the call fails harmlessly and nothing is needed. */
static void allow_daemon_to_attach(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
		(void)prctl(PR_SET_PTRACER, (unsigned long)cred.pid, 0, 0, 0);
}

DAT_RETURN df_chan_open(struct df_chan *ch, const char *path, const char *name)
{
	memset(ch, 0, sizeof(*ch));
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ch->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&ch->lock, NULL);
	pthread_mutex_init(&ch->write_lock, NULL);
	ch->fd = ch->wake_fd = -1;
	ch->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ch->wake_fd < 0)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return DF_ERROR(DAT_INVALID_PARAMETER, 0);
	strcpy(sa.sun_path, path);
	ch->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ch->fd < 0)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	if (connect(ch->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(ch->fd);
		ch->fd = -1;
		return DF_ERROR(DAT_PROVIDER_NOT_FOUND, 0);
	}
	allow_daemon_to_attach(ch->fd);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	df_frame_begin(&sb, &pk, DF_FRAME_HELLO, 4);
	msgpack_pack_unsigned_int(&pk, DF_PROTOCOL_VERSION);
	msgpack_pack_unsigned_int(&pk, DF_PROTOCOL_VERSION);
	msgpack_pack_str_with_body(&pk, "consumer", 8);
	msgpack_pack_str_with_body(&pk, name, strlen(name));
	bool sent = df_send_frame(ch, &sb);
	msgpack_sbuffer_destroy(&sb);
	return sent ? DAT_SUCCESS : DF_ERROR(DAT_PROVIDER_NOT_FOUND, 0);
}

void df_chan_close(struct df_chan *ch)
{
	if (ch->fd >= 0)
		close(ch->fd);
	if (ch->wake_fd >= 0)
		close(ch->wake_fd);
	ch->fd = ch->wake_fd = -1;
	df_drop_replies(ch);
	free(ch->in);
	ch->in = NULL;
	pthread_cond_destroy(&ch->cond);
	pthread_mutex_destroy(&ch->lock);
	pthread_mutex_destroy(&ch->write_lock);
}

/* Deadlines of the timed waits (dat_evd_wait, dat_cno_wait), on the monotonic clock. */
void df_deadline_after(struct timespec *ts, DAT_TIMEOUT us)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(us / 1000000u);
	ts->tv_nsec += (long)(us % 1000000u) * 1000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

bool df_deadline_passed(const struct timespec *deadline)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}
