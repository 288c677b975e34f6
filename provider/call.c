/* Calls on the control path: CALL [req_id, method, args] and its REPLY [req_id, code,
 * message, result] (proto/calls.py names every method's args and result). */
#include <stdlib.h>
#include <string.h>

#include "df.h"

struct df_reply {
	uint64_t req_id;
	uint8_t *raw; /* the frame's header bytes: the unpacked objects point into them */
	msgpack_unpacked msg;
	struct df_reply *next;
};

/* Keep a REPLY until its caller takes it (lock held; the reader's buffer moves on, so the
 * header is copied). */
void df_keep_reply(struct df_chan *ch, uint64_t req_id, const uint8_t *hdr, uint32_t len)
{
	struct df_reply *r = calloc(1, sizeof(*r));
	size_t off = 0;
	if (!r || !(r->raw = malloc(len))) {
		free(r);
		df_chan_kill(ch, "out of memory reading a reply");
		return;
	}
	memcpy(r->raw, hdr, len);
	msgpack_unpacked_init(&r->msg);
	msgpack_unpack_next(&r->msg, (const char *)r->raw, len, &off); /* parsed once already */
	r->req_id = req_id;
	r->next = ch->replies;
	ch->replies = r;
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

void df_drop_replies(struct df_chan *ch)
{
	while (ch->replies) {
		struct df_reply *r = ch->replies;
		ch->replies = r->next;
		df_reply_free(r);
	}
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
		return DF_ERROR(DAT_ABORT, 0);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	df_frame_begin(&sb, &pk, DF_FRAME_CALL, 3);
	msgpack_pack_uint64(&pk, req);
	msgpack_pack_str_with_body(&pk, method, strlen(method));
	if (pack)
		pack(&pk, arg);
	else
		msgpack_pack_array(&pk, 0);
	bool sent = df_send_frame(ch, &sb);
	msgpack_sbuffer_destroy(&sb);
	if (!sent)
		return DF_ERROR(DAT_ABORT, 0);
	pthread_mutex_lock(&ch->lock);
	struct df_reply *r;
	while (!(r = take_reply(ch, req)) && !ch->dead)
		df_pump_locked(ch, NULL);
	pthread_mutex_unlock(&ch->lock);
	if (!r)
		return DF_ERROR(DAT_ABORT, 0);
	const msgpack_object *f = r->msg.data.via.array.ptr;
	DAT_RETURN code = DF_ERROR(DAT_INTERNAL_ERROR, 0); /* a reply of the wrong shape */
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
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	*value = a->ptr[i].via.u64;
	return DAT_SUCCESS;
}

/* A call whose reply is one unsigned integer (a new object's handle, an RMR context, an event
 * queue's size): the call, that field, the reply freed. */
DAT_RETURN df_call_u64(struct df_ia *ia, const char *method, df_pack_fn pack, const void *arg,
		       uint64_t *value)
{
	struct df_reply *r = NULL;
	DAT_RETURN ret = df_call(ia, method, pack, arg, &r);
	if (ret != DAT_SUCCESS)
		return ret;
	ret = df_result_u64(r, 0, value);
	df_reply_free(r);
	return ret;
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
