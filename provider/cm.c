/* Connection events and requests (EPs, PSPs, RSPs and CRs are not offered yet: their events
 * cannot arrive, and one that does is read as the daemon breaking the interface). */
#include "df.h"

DAT_RETURN df_cm_event(struct df_ia *ia, const struct df_eqe *e, DAT_EVENT *event)
{
	(void)ia;
	(void)e;
	(void)event;
	return DAT_INTERNAL_ERROR;
}

bool df_evd_in_use(const struct df_evd *evd)
{
	(void)evd;
	return false;
}
