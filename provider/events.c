/* Event queue entries made into DAT_EVENTs (docs/host-interface.md 6). */
#include <string.h>

#include "df.h"

/* The object of ``type`` the daemon names ``handle`` under this IA (lock held), or NULL. */
void *df_ia_find(struct df_ia *ia, DAT_HANDLE_TYPE type, uint64_t handle)
{
	for (struct df_obj *o = ia->children; o; o = o->next)
		if (o->type == type && o->handle == handle)
			return o;
	return NULL;
}

/* The body of a non-DTO event: a msgpack array of at least ``n`` fields. */
static const msgpack_object *body_fields(const struct df_eqe *e, msgpack_unpacked *u,
					 uint32_t n)
{
	size_t off = 0;
	if (msgpack_unpack_next(u, (const char *)e->body, e->body_length, &off) !=
		    MSGPACK_UNPACK_SUCCESS ||
	    u->data.type != MSGPACK_OBJECT_ARRAY || u->data.via.array.size < n)
		return NULL;
	return u->data.via.array.ptr;
}

static uint64_t as_u64(const msgpack_object *o)
{
	return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* The EP or SRQ the daemon names ``handle`` (lock held), or NULL: the daemon's handles are
 * unique across kinds within an IA, so whichever kind has it is the one. (EVD handles are the
 * driver's own numbering: never searched here.) */
static void *ep_or_srq(struct df_ia *ia, uint64_t handle)
{
	for (struct df_obj *o = ia->children; o; o = o->next)
		if ((o->type == DAT_HANDLE_TYPE_EP || o->type == DAT_HANDLE_TYPE_SRQ) &&
		    o->handle == handle)
			return o;
	return NULL;
}

/* [handle, reason]: the object an async error names. An SRQ's events come as
 * PROVIDER_INTERNAL_ERROR with its handle (the reason says which: DAT_SRQ_LOW_WATERMARK_EVENT,
 * DAT_SRQ_TRANSFER_TO_ERROR), and an EP of an SRQ that left its connection as EP_BROKEN; a
 * PROVIDER_INTERNAL_ERROR naming no EP or SRQ is the IA's. */
static DAT_RETURN async_error(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	const msgpack_object *f = body_fields(e, &u, 2);
	DAT_RETURN ret = DF_ERROR(DAT_INTERNAL_ERROR, 0);
	if (f) {
		uint64_t h = as_u64(&f[0]);
		DAT_ASYNCH_ERROR_EVENT_DATA *d = &event->event_data.asynch_error_event_data;
		d->reason = (DAT_COUNT)as_u64(&f[1]);
		void *owner = ep_or_srq(ia, h);
		if (e->event_number == DAT_ASYNC_ERROR_EVD_OVERFLOW)
			d->dat_handle = df_ia_find(ia, DAT_HANDLE_TYPE_EVD, h);
		else if (e->event_number == DAT_ASYNC_ERROR_EP_BROKEN ||
			 e->event_number == DAT_ASYNC_ERROR_TIMED_OUT ||
			 (e->event_number == DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR && owner))
			d->dat_handle = owner;
		else
			d->dat_handle = ia;
		ret = DAT_SUCCESS;
	}
	msgpack_unpacked_destroy(&u);
	return ret;
}

/* DAT_CONNECTION_REQUEST_EVENT: the CR is made now, as the event is handed out. */
static DAT_RETURN conn_request(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	const msgpack_object *f = body_fields(e, &u, 6);
	DAT_RETURN ret = DF_ERROR(DAT_INTERNAL_ERROR, 0);
	struct df_sp *sp = NULL;
	struct df_cr *cr = f ? df_cr_from_request(ia, f, &sp) : NULL;
	if (cr) {
		DAT_CR_ARRIVAL_EVENT_DATA *d = &event->event_data.cr_arrival_event_data;
		/* an RSP fires once and is gone: its requests name no service point */
		bool psp = sp && sp->obj.type == DAT_HANDLE_TYPE_PSP;
		d->sp_handle.psp_handle = psp ? sp : DAT_HANDLE_NULL;
		d->local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->address;
		d->conn_qual = cr->conn_qual;
		d->cr_handle = cr;
		ret = DAT_SUCCESS;
	}
	msgpack_unpacked_destroy(&u);
	return ret;
}

/* A connection event: [ep, private_data, state]; the private data is kept in the EP, so the
 * pointer the event carries stays valid until the EP's next connection event that carries
 * some (ESTABLISHED's, until dat_ep_reset or dat_ep_free). An EP the program freed while its
 * event was queued (dat_ep_disconnect, then dat_ep_free) is no error: the event names none. */
static DAT_RETURN connection(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	const msgpack_object *f = body_fields(e, &u, 3);
	DAT_RETURN ret = DF_ERROR(DAT_INTERNAL_ERROR, 0);
	const msgpack_object *pd = f ? &f[1] : NULL;
	if (f && f[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
	    (pd->type == MSGPACK_OBJECT_NIL ||
	     (pd->type == MSGPACK_OBJECT_BIN && pd->via.bin.size <= DF_MAX_PRIVATE_DATA))) {
		struct df_ep *ep = df_ia_find(ia, DAT_HANDLE_TYPE_EP, f[0].via.u64);
		DAT_CONNECTION_EVENT_DATA *d = &event->event_data.connect_event_data;
		uint32_t size = pd->type == MSGPACK_OBJECT_BIN ? pd->via.bin.size : 0;
		d->ep_handle = ep;
		d->private_data_size = 0;
		d->private_data = NULL;
		if (ep) {
			if (size) {
				memcpy(ep->private_data, pd->via.bin.ptr, size);
				ep->private_data_size = (DAT_COUNT)size;
				d->private_data_size = (DAT_COUNT)size;
				d->private_data = ep->private_data;
			}
			ep->known = (DAT_EP_STATE)as_u64(&f[2]);
		}
		ret = DAT_SUCCESS;
	}
	msgpack_unpacked_destroy(&u);
	return ret;
}

/* A DTO completion, from the entry's head: ep, status, cookie, length, operation (aux). */
static void dto_completion(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d = &event->event_data.dto_completion_event_data;
	d->ep_handle = df_ia_find(ia, DAT_HANDLE_TYPE_EP, e->ep);
	d->user_cookie.as_64 = e->cookie;
	d->status = (DAT_DTO_COMPLETION_STATUS)e->status;
	d->transfered_length = e->length;
	d->operation = (DAT_DTOS)e->aux;
}

_Static_assert(sizeof(DAT_IB_EXTENSION_EVENT_DATA) <= 8 * sizeof(DAT_UINT64),
	       "the IB extension's event data fits DAT_EVENT's event_extension_data[8]");

/* DAT_IB_DTO_EVENT: a DTO completion of an IB extension's operation (the entry's aux), and
 * its DAT_IB_EXTENSION_EVENT_DATA; a receive consumed by a Write with immediate data carries
 * the immediate as its body (4 bytes, little-endian; then the SRQ's handle if it came from
 * one). */
static DAT_RETURN ib_dto_completion(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	DAT_IB_EXTENSION_EVENT_DATA x;
	memset(&x, 0, sizeof(x));
	switch (e->aux) {
	case DAT_IB_DTO_RDMA_WRITE_IMMED:
		x.type = DAT_IB_RDMA_WRITE_IMMED;
		break;
	case DAT_IB_DTO_RECV_IMMED:
		if (e->body_length != (e->flags & DF_EQE_SRQ_RECEIVE ? 8 : 4))
			return DF_ERROR(DAT_INTERNAL_ERROR, 0);
		x.type = DAT_IB_RDMA_WRITE_IMMED_DATA;
		x.val.immed.data = (uint32_t)e->body[0] | (uint32_t)e->body[1] << 8 |
				   (uint32_t)e->body[2] << 16 | (uint32_t)e->body[3] << 24;
		break;
	case DAT_IB_DTO_FETCH_ADD:
		x.type = DAT_IB_FETCH_AND_ADD;
		break;
	case DAT_IB_DTO_CMP_SWAP:
		x.type = DAT_IB_CMP_AND_SWAP;
		break;
	default: /* no other operation of the extension is offered */
		return DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	dto_completion(ia, e, event);
	x.status = e->status == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
	memcpy(event->event_extension_data, &x, sizeof(x));
	return DAT_SUCCESS;
}

/* Fill ``event`` from the entry ``e`` of ``evd``'s queue (lock held). An entry the driver
 * cannot read loses the IA: the daemon broke the interface. */
DAT_RETURN df_event_from_entry(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	event->event_number = (DAT_EVENT_NUMBER)e->event_number;
	DAT_RETURN ret = DAT_SUCCESS;
	switch (e->event_number) {
	case DAT_DTO_COMPLETION_EVENT:
		dto_completion(ia, e, event);
		break;
	case DAT_IB_DTO_EVENT:
		ret = ib_dto_completion(ia, e, event);
		break;
	case DAT_RMR_BIND_COMPLETION_EVENT: {
		DAT_RMR_BIND_COMPLETION_EVENT_DATA *d = &event->event_data.rmr_completion_event_data;
		d->rmr_handle = df_ia_find(ia, DAT_HANDLE_TYPE_RMR, e->aux);
		d->user_cookie.as_64 = e->cookie;
		d->status = (DAT_RMR_BIND_COMPLETION_STATUS)e->status;
		break;
	}
	case DAT_SOFTWARE_EVENT:
		event->event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)e->cookie;
		break;
	case DAT_ASYNC_ERROR_EVD_OVERFLOW:
	case DAT_ASYNC_ERROR_IA_CATASTROPHIC:
	case DAT_ASYNC_ERROR_EP_BROKEN:
	case DAT_ASYNC_ERROR_TIMED_OUT:
	case DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR:
		ret = async_error(ia, e, event);
		break;
	case DAT_CONNECTION_REQUEST_EVENT:
		ret = conn_request(ia, e, event);
		break;
	case DAT_CONNECTION_EVENT_ESTABLISHED:
	case DAT_CONNECTION_EVENT_PEER_REJECTED:
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED:
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR:
	case DAT_CONNECTION_EVENT_DISCONNECTED:
	case DAT_CONNECTION_EVENT_BROKEN:
	case DAT_CONNECTION_EVENT_TIMED_OUT:
	case DAT_CONNECTION_EVENT_UNREACHABLE:
		ret = connection(ia, e, event);
		break;
	default:
		ret = DF_ERROR(DAT_INTERNAL_ERROR, 0);
	}
	if (ret != DAT_SUCCESS)
		df_ia_break(ia, "an event the driver cannot read");
	return ret;
}
