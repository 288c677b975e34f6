/* Consumer notification objects: dat_cno_create, dat_cno_query, dat_cno_wait, dat_cno_free,
 * dat_cno_modify_agent. A CNO is the driver's alone: one waiter for the EVDs attached to it
 * (dat_evd_create, dat_evd_modify_cno), woken by the first enabled one that holds a
 * notification (as dat_evd_wait is). */
#include "df.h"

DAT_RETURN df_cno_create(DAT_IA_HANDLE ia_handle, DAT_OS_WAIT_PROXY_AGENT agent,
			 DAT_CNO_HANDLE *cno_handle)
{
	struct df_ia *ia = df_obj_check(ia_handle, DAT_HANDLE_TYPE_IA);
	if (!ia)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (!cno_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct df_cno *cno = df_obj_new(ia, sizeof(*cno), DAT_HANDLE_TYPE_CNO, 0);
	if (!cno)
		return DF_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cno->agent = agent;
	*cno_handle = cno;
	return DAT_SUCCESS;
}

DAT_RETURN df_cno_modify_agent(DAT_CNO_HANDLE handle, DAT_OS_WAIT_PROXY_AGENT agent)
{
	struct df_cno *cno = df_obj_check(handle, DAT_HANDLE_TYPE_CNO);
	if (!cno)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	cno->agent = agent;
	return DAT_SUCCESS;
}

DAT_RETURN df_cno_query(DAT_CNO_HANDLE handle, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM *p)
{
	struct df_cno *cno = df_obj_check(handle, DAT_HANDLE_TYPE_CNO);
	(void)mask;
	if (!cno)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	if (!p)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = cno->obj.ia;
	p->proxy_type = DAT_PROXY_TYPE_AGENT;
	p->proxy.agent = cno->agent;
	return DAT_SUCCESS;
}

/* dat_cno_free: refused while an EVD was created with it. */
DAT_RETURN df_cno_free(DAT_CNO_HANDLE handle)
{
	struct df_cno *cno = df_obj_check(handle, DAT_HANDLE_TYPE_CNO);
	if (!cno)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	pthread_mutex_lock(&cno->obj.ia->chan.lock);
	bool busy = cno->evds || cno->waiting;
	pthread_mutex_unlock(&cno->obj.ia->chan.lock);
	if (busy)
		return DF_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
	df_obj_release(&cno->obj);
	return DAT_SUCCESS;
}

/* The first EVD of the CNO holding a notification (lock held), or NULL; ``arm`` asks the
 * daemon to NOTIFY for each. */
static struct df_evd *ready_evd(struct df_cno *cno, bool arm)
{
	for (struct df_obj *o = cno->obj.ia->children; o; o = o->next) {
		struct df_evd *evd = (struct df_evd *)o;
		if (o->type != DAT_HANDLE_TYPE_EVD || evd->cno != cno || !evd->enabled)
			continue; /* a disabled EVD does not affect its CNO */
		if (df_evd_refill(evd) > 0 && evd->notifying)
			return evd;
		if (arm)
			df_evd_arm(evd, 1);
	}
	return NULL;
}

DAT_RETURN df_cno_wait(DAT_CNO_HANDLE handle, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd_handle)
{
	struct df_cno *cno = df_obj_check(handle, DAT_HANDLE_TYPE_CNO);
	if (!cno)
		return DF_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
	if (!evd_handle)
		return DF_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	struct df_ia *ia = cno->obj.ia;
	struct timespec deadline;
	if (timeout != DAT_TIMEOUT_INFINITE)
		df_deadline_after(&deadline, timeout);
	pthread_mutex_lock(&ia->chan.lock);
	cno->waiting = true;
	DAT_RETURN ret = DAT_SUCCESS;
	for (;;) {
		struct df_evd *evd = ready_evd(cno, false);
		if (evd) {
			*evd_handle = evd;
			break;
		}
		if (ia->chan.dead) {
			ret = DF_ERROR(DAT_ABORT, 0);
			break;
		}
		if (timeout != DAT_TIMEOUT_INFINITE && df_deadline_passed(&deadline)) {
			ret = DF_ERROR(DAT_TIMEOUT_EXPIRED, 0);
			break;
		}
		if (ready_evd(cno, true)) /* what came before the ARMs is seen now */
			continue;
		df_ia_kick(ia); /* before blocking: no post may be stranded */
		df_pump_locked(&ia->chan, timeout == DAT_TIMEOUT_INFINITE ? NULL : &deadline);
	}
	cno->waiting = false;
	pthread_mutex_unlock(&ia->chan.lock);
	return ret;
}
