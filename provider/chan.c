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
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "df.h"

struct df_reply {
	uint64_t req_id;
	uint8_t *raw; /* the frame's header bytes: the unpacked objects point into them */
	msgpack_unpacked msg;
	struct df_reply *next;
};

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

void df_chan_kill(struct df_chan *ch, const char *reason)
{
	if (!ch->dead) {
		ch->dead = true;
		snprintf(ch->reason, sizeof(ch->reason), "%s", reason);
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

/* Send the frame in ``sb`` (its first 4 bytes reserved for the length). */
static bool send_frame(struct df_chan *ch, msgpack_sbuffer *sb)
{
	put_be32((uint8_t *)sb->data, (uint32_t)(sb->size - 4));
	if (send_all(ch, (const uint8_t *)sb->data, sb->size))
		return true;
	pthread_mutex_lock(&ch->lock);
	df_chan_kill(ch, "the daemon's socket refused a frame");
	pthread_mutex_unlock(&ch->lock);
	return false;
}

static void frame_begin(msgpack_sbuffer *sb, msgpack_packer *pk, enum df_frame type, size_t fields)
{
	msgpack_sbuffer_init(sb);
	msgpack_sbuffer_write(sb, "\0\0\0\0", 4);
	msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(pk, 2 + fields);
	msgpack_pack_unsigned_int(pk, type);
	msgpack_pack_unsigned_int(pk, 0); /* payload_len: the control path carries none */
}

/* One frame from the daemon (lock held). Anything but HELLO, REPLY, NOTIFY or ERROR, or a
 * header of the wrong shape, means the daemon broke the protocol: the IA is lost. */
static void take_frame(struct df_chan *ch, const uint8_t *hdr, uint32_t len)
{
	struct df_reply *r = calloc(1, sizeof(*r));
	if (!r || !(r->raw = malloc(len ? len : 1))) {
		free(r);
		df_chan_kill(ch, "out of memory reading a frame");
		return;
	}
	memcpy(r->raw, hdr, len);
	msgpack_unpacked_init(&r->msg);
	size_t off = 0;
	const msgpack_object *f = NULL;
	uint32_t n = 0;
	if (msgpack_unpack_next(&r->msg, (const char *)r->raw, len, &off) == MSGPACK_UNPACK_SUCCESS &&
	    r->msg.data.type == MSGPACK_OBJECT_ARRAY && r->msg.data.via.array.size >= 2 &&
	    r->msg.data.via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		f = r->msg.data.via.array.ptr;
		n = r->msg.data.via.array.size;
	}
	uint64_t type = f ? f[0].via.u64 : 0;
	if (type == DF_FRAME_REPLY && n == 6 && f[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		r->req_id = f[2].via.u64;
		r->next = ch->replies;
		ch->replies = r;
		return;
	}
	if (type == DF_FRAME_NOTIFY)
		ch->notifies++;
	else if (type == DF_FRAME_ERROR && n == 3 && f[2].type == MSGPACK_OBJECT_STR) {
		char why[128];
		snprintf(why, sizeof(why), "daemon reported: %.*s", (int)f[2].via.str.size,
			 f[2].via.str.ptr);
		df_chan_kill(ch, why);
	} else if (type != DF_FRAME_HELLO)
		df_chan_kill(ch, "a frame the daemon may not send");
	msgpack_unpacked_destroy(&r->msg);
	free(r->raw);
	free(r);
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
static bool pump_locked(struct df_chan *ch, const struct timespec *deadline)
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

/* Read what the daemon has sent, without waiting (a death behind other frames shows). */
void df_chan_drain(struct df_chan *ch)
{
	struct timespec now;
	pthread_mutex_lock(&ch->lock);
	do
		clock_gettime(CLOCK_MONOTONIC, &now);
	while (!ch->reading && pump_locked(ch, &now));
	pthread_mutex_unlock(&ch->lock);
}

/* Sleep until input arrives, an interrupt, or ``deadline`` (lock held by the caller). */
void df_chan_wait(struct df_chan *ch, const struct timespec *deadline)
{
	pump_locked(ch, deadline);
}

static struct df_reply *take_reply(struct df_chan *ch, uint64_t req_id)
{
	for (struct df_reply **p = &ch->replies; *p; p = &(*p)->next) {
		if ((*p)->req_id == req_id) {
			struct df_reply *r = *p;
			*p = r->next;
			return r;
		}
	}
	return NULL;
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
		return DAT_INSUFFICIENT_RESOURCES;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return DAT_INVALID_PARAMETER;
	strcpy(sa.sun_path, path);
	ch->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ch->fd < 0)
		return DAT_INSUFFICIENT_RESOURCES;
	if (connect(ch->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(ch->fd);
		ch->fd = -1;
		return DAT_PROVIDER_NOT_FOUND;
	}
	msgpack_sbuffer sb;
	msgpack_packer pk;
	frame_begin(&sb, &pk, DF_FRAME_HELLO, 4);
	msgpack_pack_unsigned_int(&pk, DF_PROTOCOL_VERSION);
	msgpack_pack_unsigned_int(&pk, DF_PROTOCOL_VERSION);
	msgpack_pack_str_with_body(&pk, "consumer", 8);
	msgpack_pack_str_with_body(&pk, name, strlen(name));
	bool sent = send_frame(ch, &sb);
	msgpack_sbuffer_destroy(&sb);
	return sent ? DAT_SUCCESS : DAT_PROVIDER_NOT_FOUND;
}

void df_chan_close(struct df_chan *ch)
{
	if (ch->fd >= 0)
		close(ch->fd);
	if (ch->wake_fd >= 0)
		close(ch->wake_fd);
	ch->fd = ch->wake_fd = -1;
	while (ch->replies) {
		struct df_reply *r = ch->replies;
		ch->replies = r->next;
		df_reply_free(r);
	}
	free(ch->in);
	ch->in = NULL;
	pthread_cond_destroy(&ch->cond);
	pthread_mutex_destroy(&ch->lock);
	pthread_mutex_destroy(&ch->write_lock);
}

DAT_RETURN df_doorbell(struct df_chan *ch, uint32_t ep)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	frame_begin(&sb, &pk, DF_FRAME_DOORBELL, 1);
	msgpack_pack_unsigned_int(&pk, ep);
	bool sent = send_frame(ch, &sb);
	msgpack_sbuffer_destroy(&sb);
	return sent ? DAT_SUCCESS : DAT_ABORT;
}

/* A call: CALL [req_id, method, args] and its REPLY [req_id, code, message, result]. On
 * DAT_SUCCESS with ``out`` not NULL, *out is the reply (df_result reads it, df_reply_free
 * frees it). */
DAT_RETURN df_call(struct df_ia *ia, const char *method, df_pack_fn pack, const void *arg,
		   struct df_reply **out)
{
	struct df_chan *ch = &ia->chan;
	pthread_mutex_lock(&ch->lock);
	uint64_t req = ++ch->next_req;
	bool dead = ch->dead;
	pthread_mutex_unlock(&ch->lock);
	if (dead)
		return DAT_ABORT;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	frame_begin(&sb, &pk, DF_FRAME_CALL, 3);
	msgpack_pack_uint64(&pk, req);
	msgpack_pack_str_with_body(&pk, method, strlen(method));
	if (pack)
		pack(&pk, arg);
	else
		msgpack_pack_array(&pk, 0);
	bool sent = send_frame(ch, &sb);
	msgpack_sbuffer_destroy(&sb);
	if (!sent)
		return DAT_ABORT;
	pthread_mutex_lock(&ch->lock);
	struct df_reply *r;
	while (!(r = take_reply(ch, req)) && !ch->dead)
		pump_locked(ch, NULL);
	pthread_mutex_unlock(&ch->lock);
	if (!r)
		return DAT_ABORT;
	const msgpack_object *f = r->msg.data.via.array.ptr;
	DAT_RETURN code = DAT_INTERNAL_ERROR; /* a reply of the wrong shape */
	if (f[3].type == MSGPACK_OBJECT_POSITIVE_INTEGER && f[5].type == MSGPACK_OBJECT_ARRAY)
		code = (DAT_RETURN)f[3].via.u64;
	if (code == DAT_SUCCESS && out) {
		*out = r;
		return code;
	}
	df_reply_free(r);
	return code;
}

const msgpack_object_array *df_result(const struct df_reply *r)
{
	return &r->msg.data.via.array.ptr[5].via.array;
}

void df_reply_free(struct df_reply *r)
{
	if (!r)
		return;
	msgpack_unpacked_destroy(&r->msg);
	free(r->raw);
	free(r);
}

/* Result field ``i`` as an unsigned integer (DAT_INTERNAL_ERROR if the daemon sent another
 * shape: a driver never trusts a reply it cannot read). */
DAT_RETURN df_result_u64(const struct df_reply *r, uint32_t i, uint64_t *value)
{
	const msgpack_object_array *a = df_result(r);
	if (i >= a->size || a->ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return DAT_INTERNAL_ERROR;
	*value = a->ptr[i].via.u64;
	return DAT_SUCCESS;
}

const msgpack_object *df_map_get(const msgpack_object *map, const char *key)
{
	if (map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	size_t n = strlen(key);
	for (uint32_t i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
		    !memcmp(k->via.str.ptr, key, n))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}
