/*
 * bench/plot: PNG charts of ckstore-bench's figures drawn by gnuplot
 * (--plot DIR). Each chart is a .dat file (the figures) and a .gp script
 * next to it, so that it can be redrawn or restyled by hand; gnuplot is run
 * on the script when it is installed, and skipped with a note otherwise.
 */
#ifndef CKS_BENCH_PLOT_H
#define CKS_BENCH_PLOT_H

#include <stdint.h>

/** One bar of a bar chart. */
typedef struct {
    char label[48];
    double value;
    unsigned group; /* 0: ckstore, 1: a limit of this machine, 2: a peer */
} bench_bar_t;

/** DIR/NAME.dat, DIR/NAME.gp, DIR/NAME.png: bars with labels. 0 or -1. */
int bench_plot_bars(const char *dir, const char *name, const char *title,
                    const char *ylabel, const bench_bar_t *bars, unsigned n,
                    double timeout_s);

/** One series of a line chart: y (with min and max as error bars) over x. */
typedef struct {
    char title[48];
    double x[32], y[32], ymin[32], ymax[32];
    unsigned n;
} bench_series_t;

/** DIR/NAME.{dat,gp,png}: lines over x (logscale_x: log 2 axis). */
int bench_plot_lines(const char *dir, const char *name, const char *title,
                     const char *xlabel, const char *ylabel, int logscale_x,
                     const bench_series_t *s, unsigned n, double timeout_s);

#endif
