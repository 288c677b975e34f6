/* proto/pack_u64.h: a frame's header of unsigned ints packed by msgpack-c (libmsgpack-dev's
 * pack.h), framed as proto.codec.encode frames any header: a 4-byte big-endian length, then
 * the msgpack array of the ints. Shared by proto/_pack.c (headers the Python side asks for)
 * and fabricd/_lanes.c (the READ_RESP its Read lane answers with); included once, after
 * Python.h. */
#ifndef PROTO_PACK_U64_H
#define PROTO_PACK_U64_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define PACK_MAX_ITEMS 8 /* type, payload length and the fields: a READ_REQ has 7 */
#define PACK_PREFIX 4 /* the header's length, big-endian */

/* A framed header being packed: the prefix, then what msgpack-c writes (a u64: 9 bytes at
 * most). */
struct packed {
	char bytes[PACK_PREFIX + 1 + PACK_MAX_ITEMS * 9];
	size_t len;
};

/* msgpack-c's write callback: append, or refuse what does not fit (never: sized above). */
static int packed_append(void *data, const char *buf, size_t len)
{
	struct packed *p = data;

	if (len > sizeof p->bytes - p->len)
		return -1;
	memcpy(p->bytes + p->len, buf, len);
	p->len += len;
	return 0;
}

/* ``count`` (1..PACK_MAX_ITEMS) u64s framed into ``p``; false when they do not fit. */
static bool pack_u64s(struct packed *p, const unsigned long long *items, size_t count)
{
	msgpack_packer pk;
	size_t body;

	if (!count || count > PACK_MAX_ITEMS)
		return false;
	p->len = PACK_PREFIX;
	msgpack_packer_init(&pk, p, packed_append);
	if (msgpack_pack_array(&pk, count))
		return false;
	for (size_t i = 0; i < count; i++)
		if (msgpack_pack_uint64(&pk, (uint64_t)items[i]))
			return false;
	body = p->len - PACK_PREFIX;
	p->bytes[0] = (char)(body >> 24);
	p->bytes[1] = (char)(body >> 16);
	p->bytes[2] = (char)(body >> 8);
	p->bytes[3] = (char)body;
	return true;
}

#endif
