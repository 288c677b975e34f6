/* Connection requests: dat_cr_query, dat_cr_accept, dat_cr_reject, dat_cr_handoff, and the CR
 * a CONNECTION_REQUEST event carries (made when the event is handed out). */
#include <string.h>

#include "df.h"

/* The CR of a CONNECTION_REQUEST entry's body [sp, conn_qual, cr, remote_address,
 * private_data, ep] (lock held); a PSP with the PROVIDER flag made the EP it names. */
struct df_cr *df_cr_from_request(struct df_ia *ia, const msgpack_object *f, struct df_sp **sp)
{
	if (f[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    f[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    f[5].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
	    (f[4].type != MSGPACK_OBJECT_BIN && f[4].type != MSGPACK_OBJECT_NIL) ||
	    (f[4].type == MSGPACK_OBJECT_BIN && f[4].via.bin.size > DF_MAX_PRIVATE_DATA))
		return NULL;
	uint64_t sp_handle = f[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER ? f[0].via.u64 : 0;
	*sp = df_ia_find(ia, DAT_HANDLE_TYPE_PSP, sp_handle);
	if (!*sp)
		*sp = df_ia_find(ia, DAT_HANDLE_TYPE_RSP, sp_handle);
	struct df_cr *cr = df_obj_new_locked(ia, sizeof(*cr), DAT_HANDLE_TYPE_CR,
					     (uint32_t)f[2].via.u64);
	if (!cr)
		return NULL;
	cr->conn_qual = f[1].via.u64;
	df_parse_address(&f[3], &cr->remote_address);
	if (f[4].type == MSGPACK_OBJECT_BIN) {
		cr->private_data_size = (DAT_COUNT)f[4].via.bin.size;
		memcpy(cr->private_data, f[4].via.bin.ptr, f[4].via.bin.size);
	}
	uint64_t ep = f[5].via.u64;
	if (ep) {
		cr->ep = df_ia_find(ia, DAT_HANDLE_TYPE_EP, ep);
		if (!cr->ep) { /* made by the provider for this request: no PZ or EVDs yet */
			cr->ep = df_obj_new_locked(ia, sizeof(struct df_ep), DAT_HANDLE_TYPE_EP,
						   (uint32_t)ep);
			if (cr->ep) {
				cr->ep->known = DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
				cr->ep->provided = true;
				/* mapped now: its state is the STATE word from here on (the
				 * accept's COMPLETION_PENDING included), as for any EP */
				df_ep_queues(cr->ep);
			}
		}
	}
	return cr;
}

static struct df_cr *check_cr(DAT_CR_HANDLE handle)
{
	return df_obj_check(handle, DAT_HANDLE_TYPE_CR);
}

DAT_RETURN df_cr_query(DAT_CR_HANDLE handle, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *p)
{
	struct df_cr *cr = check_cr(handle);
	(void)mask;
	if (!cr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&cr->remote_address;
	p->remote_port_qual = cr->conn_qual;
	p->private_data_size = cr->private_data_size;
	p->private_data = cr->private_data;
	p->local_ep_handle = cr->ep;
	return DAT_SUCCESS;
}

struct answer_args {
	const struct df_cr *cr;
	const struct df_ep *ep; /* accept: NULL = the CR's */
	const void *data;
	DAT_COUNT size;
	bool accept;
};

/* proto.calls.CrAccept [cr, ep, private_data] / CrReject [cr, private_data]. */
static void pack_answer(msgpack_packer *pk, const void *arg)
{
	const struct answer_args *a = arg;
	msgpack_pack_array(pk, a->accept ? 3 : 2);
	msgpack_pack_unsigned_int(pk, a->cr->obj.handle);
	if (a->accept)
		msgpack_pack_unsigned_int(pk, a->ep ? a->ep->obj.handle : 0);
	msgpack_pack_bin(pk, (size_t)a->size);
	msgpack_pack_bin_body(pk, a->data, (size_t)a->size);
}

static DAT_RETURN answer(struct answer_args *a, DAT_RETURN size_arg)
{
	if (a->size < 0 || a->size > DF_MAX_PRIVATE_DATA)
		return DF_ERROR(DAT_INVALID_PARAMETER, size_arg);
	if (a->size && !a->data)
		return DF_ERROR(DAT_INVALID_PARAMETER, size_arg + 1);
	struct df_cr *cr = (struct df_cr *)a->cr;
	struct df_ia *ia = cr->obj.ia;
	DAT_RETURN ret = df_call(ia, a->accept ? "cr_accept" : "cr_reject", pack_answer, a, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT)
		return ret;
	struct df_ep *made = cr->ep;
	struct df_ep *ep = a->accept ? (struct df_ep *)(a->ep ? a->ep : made) : NULL;
	if (ep && ret == DAT_SUCCESS) {
		pthread_mutex_lock(&ia->chan.lock);
		ep->remote_address = cr->remote_address;
		ep->remote_port_qual = cr->conn_qual;
		pthread_mutex_unlock(&ia->chan.lock);
	}
	bool forget_ep = !a->accept && made && made->provided;
	df_obj_release(&cr->obj);
	if (forget_ep)
		df_ep_destroy(made); /* the daemon freed the EP it had made */
	return ret;
}

DAT_RETURN df_cr_accept(DAT_CR_HANDLE handle, DAT_EP_HANDLE ep_handle, DAT_COUNT size,
			const DAT_PVOID data)
{
	struct df_cr *cr = check_cr(handle);
	if (!cr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	struct answer_args a = {.cr = cr, .data = data, .size = size, .accept = true};
	if (ep_handle != DAT_HANDLE_NULL) {
		a.ep = df_obj_check(ep_handle, DAT_HANDLE_TYPE_EP);
		if (!a.ep || a.ep->obj.ia != cr->obj.ia)
			return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	}
	return answer(&a, DAT_INVALID_ARG3);
}

DAT_RETURN df_cr_reject(DAT_CR_HANDLE handle, DAT_COUNT size, const DAT_PVOID data)
{
	struct df_cr *cr = check_cr(handle);
	if (!cr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	struct answer_args a = {.cr = cr, .data = data, .size = size, .accept = false};
	return answer(&a, DAT_INVALID_ARG2);
}

/* dat_cr_handoff: the request goes to the listener of ``conn_qual`` on this node (another PSP
 * or RSP, of this IA or another); the CR is destroyed here, and an EP the provider made for it
 * is gone too (as on dat_cr_reject). */
DAT_RETURN df_cr_handoff(DAT_CR_HANDLE handle, DAT_CONN_QUAL conn_qual)
{
	struct df_cr *cr = check_cr(handle);
	if (!cr)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
	struct df_pair args = {cr->obj.handle, conn_qual};
	DAT_RETURN ret = df_call(cr->obj.ia, "cr_handoff", df_pack_pair, &args, NULL);
	if (ret != DAT_SUCCESS && DAT_GET_TYPE(ret) != DAT_ABORT)
		return ret; /* the CR is still the caller's */
	struct df_ep *made = cr->ep;
	bool forget_ep = made && made->provided;
	df_obj_release(&cr->obj);
	if (forget_ep)
		df_ep_destroy(made);
	return ret;
}
