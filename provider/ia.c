/* The IA: one control stream to the node's daemon, the async EVD, and every child object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "df.h"

static void close_ia(struct df_ia *ia)
{
	while (ia->children) {
		struct df_obj *o = ia->children;
		if (o->type == DAT_HANDLE_TYPE_EVD)
			df_evd_destroy((struct df_evd *)o);
		else if (o->type == DAT_HANDLE_TYPE_EP)
			df_ep_destroy((struct df_ep *)o);
		else if (o->type == DAT_HANDLE_TYPE_SRQ)
			df_srq_destroy((struct df_srq *)o);
		else
			df_obj_release(o);
	}
	df_chan_close(&ia->chan);
	df_reply_free(ia->attrs);
	ia->obj.magic = DF_DEAD;
	free(ia);
}

static DAT_RETURN open_ia(const char *name, DAT_BOOLEAN thread_safe, DAT_COUNT async_qlen,
			  DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia_handle)
{
	struct df_provider *prov = df_registry_find(name, thread_safe);
	if (!prov)
		return DF_ERROR(DAT_PROVIDER_NOT_FOUND, 0);
	if (!async_evd)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!ia_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (*async_evd != DAT_HANDLE_NULL)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC); /* no EVD is shared */
	if (async_qlen <= 0)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	struct df_ia *ia = calloc(1, sizeof(*ia));
	if (!ia)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, 0);
	ia->obj.provider = &prov->dat;
	ia->obj.magic = DF_MAGIC;
	ia->obj.type = DAT_HANDLE_TYPE_IA;
	ia->obj.ia = ia;
	ia->prov = prov;
	ia->next_evd = DF_ASYNC_EVD;
	uint32_t token = 0;
	if (getrandom(&token, sizeof(token), 0) != sizeof(token))
		token = (uint32_t)(uintptr_t)ia;
	snprintf(ia->name, sizeof(ia->name), "%d-%08x", (int)getpid(), token);
	DAT_RETURN ret = df_chan_open(&ia->chan, prov->socket_path, ia->name);
	if (ret != DAT_SUCCESS) {
		df_chan_close(&ia->chan);
		free(ia);
		return ret;
	}
	ret = df_evd_make(ia, async_qlen, DAT_EVD_ASYNC_FLAG, DF_ASYNC_EVD, &ia->async_evd);
	if (ret == DAT_SUCCESS)
		ret = df_ia_fetch_attributes(ia);
	if (ret != DAT_SUCCESS) {
		bool refused = ia->chan.refused; /* the daemon serves its limit of IAs */
		close_ia(ia);
		if (refused)
			return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
		return DAT_GET_TYPE(ret) == DAT_ABORT ? DF_ERROR(DAT_PROVIDER_NOT_FOUND, 0) : ret;
	}
	*async_evd = ia->async_evd;
	*ia_handle = ia;
	return DAT_SUCCESS;
}

/* dat_ia_open through a "nonthreadsafe" dat.conf line, and through a "threadsafe" one. */
DAT_RETURN df_ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen, DAT_EVD_HANDLE *async_evd,
		      DAT_IA_HANDLE *ia_handle)
{
	return open_ia(name, DAT_FALSE, async_qlen, async_evd, ia_handle);
}

DAT_RETURN df_ia_open_threadsafe(const DAT_NAME_PTR name, DAT_COUNT async_qlen,
				 DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia_handle)
{
	return open_ia(name, DAT_TRUE, async_qlen, async_evd, ia_handle);
}

/* dat_ia_close: GRACEFUL refuses while any object but the async EVD is alive; ABRUPT frees
 * everything (closing the stream makes the daemon free the IA's objects, as on a crash). */
DAT_RETURN df_ia_close(DAT_IA_HANDLE handle, DAT_CLOSE_FLAGS flags)
{
	struct df_ia *ia = df_obj_check(handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ia->chan.lock);
	bool busy = false;
	for (struct df_obj *o = ia->children; o; o = o->next)
		busy |= o != &ia->async_evd->obj;
	pthread_mutex_unlock(&ia->chan.lock);
	if (flags == DAT_CLOSE_GRACEFUL_FLAG && busy)
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE);
	close_ia(ia);
	return DAT_SUCCESS;
}

/* The daemon broke the interface (a ring index past the ring, an entry the driver cannot
 * read; lock held): the IA is lost and none of its rings is read again. A daemon that merely
 * died leaves its rings readable: what they hold is still handed out. */
void df_ia_break(struct df_ia *ia, const char *reason)
{
	ia->broken = true;
	df_chan_kill(&ia->chan, reason);
}
