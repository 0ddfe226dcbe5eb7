/* Redirecting a function that loaded libraries import through their GOT (got_hook.c). */
#ifndef GGML_VIZ_GOT_HOOK_H
#define GGML_VIZ_GOT_HOOK_H

/* Given the function a library's slot resolves to, what its calls should go to instead
   (NULL: leave that library alone). */
typedef void *(*GotReplacement)(void *original, void *context);

/* Point every loaded library's import of `symbol` at replace(its original): the number of
   slots now redirected (already redirected ones count); *failed: slots that could not be. */
int got_hook(const char *symbol, GotReplacement replace, void *context, int *failed);

#endif
