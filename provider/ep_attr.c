/* DAT_EP_ATTR as the daemon names its fields (proto.attrs.EpAttr): packed for dat_ep_create
 * and dat_ep_modify, read back from what the daemon granted. */
#include <stddef.h>
#include <string.h>

#include "df.h"

/* DAT_EP_ATTR's fields as the daemon names them (proto.attrs.EpAttr). */
static const struct {
	const char *name;
	size_t offset;
	size_t size;
	DAT_EP_PARAM_MASK bit;
} attr_fields[] = {
#define F(field, BIT) {#field, offsetof(DAT_EP_ATTR, field), sizeof(((DAT_EP_ATTR *)0)->field), \
		       DAT_EP_FIELD_EP_ATTR_##BIT}
	F(service_type, SERVICE_TYPE),
	F(max_message_size, MAX_MESSAGE_SIZE),
	F(max_rdma_size, MAX_RDMA_SIZE),
	F(qos, QOS),
	F(recv_completion_flags, RECV_COMPLETION_FLAGS),
	F(request_completion_flags, REQUEST_COMPLETION_FLAGS),
	F(max_recv_dtos, MAX_RECV_DTOS),
	F(max_request_dtos, MAX_REQUEST_DTOS),
	F(max_recv_iov, MAX_RECV_IOV),
	F(max_request_iov, MAX_REQUEST_IOV),
	F(max_rdma_read_in, MAX_RDMA_READ_IN),
	F(max_rdma_read_out, MAX_RDMA_READ_OUT),
	F(max_rdma_read_iov, MAX_RDMA_READ_IOV),
	F(max_rdma_write_iov, MAX_RDMA_WRITE_IOV),
#undef F
};
#define N_ATTR_FIELDS (sizeof(attr_fields) / sizeof(attr_fields[0]))

/* A field as a signed 64-bit value (DAT_COUNT is signed: a negative count must reach the
 * daemon as negative, which refuses it). */
static int64_t attr_get(const DAT_EP_ATTR *a, size_t i)
{
	const uint8_t *p = (const uint8_t *)a + attr_fields[i].offset;
	if (attr_fields[i].size == 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		return (int64_t)v;
	}
	int32_t v;
	memcpy(&v, p, 4);
	return attr_fields[i].bit == DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS ||
			       attr_fields[i].bit == DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS
		       ? (int64_t)(uint32_t)v
		       : v;
}

static void attr_set(DAT_EP_ATTR *a, size_t i, uint64_t v)
{
	uint8_t *p = (uint8_t *)a + attr_fields[i].offset;
	if (attr_fields[i].size == 8) {
		memcpy(p, &v, 8);
	} else { /* a DAT_SEG_LENGTH (32 bits): a larger limit reads as its maximum */
		uint32_t w = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
		memcpy(p, &w, 4);
	}
}

/* The size attributes a C program asks for are lower bounds, as on verbs providers (where
 * they are no per-EP limit at all): programs written for those, Debian's dtest among them,
 * move more than they asked for. Up to the node's own limit, the EP gets that limit (sent as
 * 0: the daemon's default); beyond it the daemon refuses, as dat_ep_create says. */
static int64_t requested(const struct df_ia *ia, size_t i, int64_t v)
{
	DAT_EP_PARAM_MASK bit = attr_fields[i].bit;
	if (bit != DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE && bit != DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE)
		return v;
	uint64_t limit = df_ia_attr(ia, attr_fields[i].name);
	return v >= 0 && (uint64_t)v <= limit ? 0 : v;
}

void df_pack_ep_attr(msgpack_packer *pk, const struct df_ia *ia, const DAT_EP_ATTR *a)
{
	if (!a) {
		msgpack_pack_nil(pk);
		return;
	}
	msgpack_pack_map(pk, N_ATTR_FIELDS);
	for (size_t i = 0; i < N_ATTR_FIELDS; i++) {
		size_t n = strlen(attr_fields[i].name);
		msgpack_pack_str(pk, n);
		msgpack_pack_str_body(pk, attr_fields[i].name, n);
		msgpack_pack_int64(pk, requested(ia, i, attr_get(a, i)));
	}
}

/* The attributes the daemon granted (a map of the names above; all must be there). */
DAT_RETURN df_read_ep_attr(const msgpack_object *map, DAT_EP_ATTR *out)
{
	DAT_EP_ATTR a;
	memset(&a, 0, sizeof(a));
	for (size_t i = 0; i < N_ATTR_FIELDS; i++) {
		const msgpack_object *o = df_map_get(map, attr_fields[i].name);
		if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return DF_ERROR(DAT_INTERNAL_ERROR, 0);
		attr_set(&a, i, o->via.u64);
	}
	a.srq_soft_hw = DAT_HW_DEFAULT;
	*out = a;
	return DAT_SUCCESS;
}

/* The fields of ``from`` that ``mask`` names, over ``into`` (dat_ep_modify). */
void df_merge_ep_attr(DAT_EP_ATTR *into, const DAT_EP_ATTR *from, DAT_EP_PARAM_MASK mask)
{
	for (size_t i = 0; i < N_ATTR_FIELDS; i++)
		if (mask & attr_fields[i].bit)
			attr_set(into, i, (uint64_t)attr_get(from, i));
}
