/*
 * DESIGN: the charts of --plot (plot.h). Writes the figures as gnuplot data
 * files and a script per chart, then runs gnuplot (fork + exec, from PATH,
 * stopped by its pid after the timeout). Runs on the main thread, after
 * the measurements. Never: draw anything itself, or fail the run: a missing
 * gnuplot is a note.
 */
#include "plot.h"
#include "bench.h"
#include "proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* DIR/NAME.EXT for writing (DIR made first); NULL, said on stderr. */
static FILE *plot_open(const char *dir, const char *name, const char *ext)
{
    char path[4096];
    FILE *f;
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/%s.%s", dir, name, ext);
    if ((f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "ckstore-bench: %s: %s\n", path, strerror(errno));
    }
    return f;
}

/* Run gnuplot on DIR/NAME.gp (in DIR, so that the script's file names are
 * relative); a note when there is no gnuplot. */
static int plot_run(const char *dir, const char *name, double timeout_s)
{
    static int warned;
    char bin[4096], gp[4096], png[4096];
    int wstatus = 0;
    if (bench_which("gnuplot", bin, sizeof(bin)) != 0) {
        if (!warned) {
            fprintf(stderr,
                    "ckstore-bench: NOTE: no gnuplot in PATH (Debian package "
                    "gnuplot-nox; scripts/deps --bench): the .dat and .gp files "
                    "are in %s, the PNGs are not drawn\n",
                    dir);
            warned = 1;
        }
        return -1;
    }
    snprintf(gp, sizeof(gp), "%s/%s.gp", dir, name);
    char *argv[] = {bin, gp, NULL};
    pid_t pid = bench_spawn(argv, -1);
    if (pid < 0) {
        return -1;
    }
    if (!bench_wait_pid(pid, timeout_s, &wstatus)) {
        fprintf(stderr, "ckstore-bench: gnuplot (pid %d) took longer than %.0f s\n",
                (int)pid, timeout_s);
        bench_stop_pid(pid, SIGKILL, timeout_s);
        return -1;
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        fprintf(stderr, "ckstore-bench: gnuplot %s failed (status 0x%x)\n", gp, wstatus);
        return -1;
    }
    snprintf(png, sizeof(png), "%s/%s.png", dir, name);
    printf("chart: %s\n", png);
    return 0;
}

/* gnuplot wants its own quoting: no double quotes inside a string. */
static void plot_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        fputc(*s == '"' ? '\'' : *s, f);
    }
    fputc('"', f);
}

int bench_plot_bars(const char *dir, const char *name, const char *title,
                    const char *ylabel, const bench_bar_t *bars, unsigned n,
                    double timeout_s)
{
    static const char *const colors[] = {"#1f77b4", "#7f7f7f", "#ff7f0e"};
    FILE *f;
    if (n == 0) {
        return 0;
    }
    if ((f = plot_open(dir, name, "dat")) == NULL) {
        return -1;
    }
    fprintf(f, "# label GB/s group (0 ckstore, 1 limit, 2 peer)\n");
    for (unsigned i = 0; i < n; i++) {
        plot_str(f, bars[i].label);
        fprintf(f, " %.4f %u\n", bars[i].value, bars[i].group);
    }
    fclose(f);
    if ((f = plot_open(dir, name, "gp")) == NULL) {
        return -1;
    }
    fprintf(f, "set terminal pngcairo size 1200,640 font 'Sans,10'\n");
    fprintf(f, "cd ");
    plot_str(f, dir);
    fprintf(f, "\nset output '%s.png'\nset title ", name);
    plot_str(f, title);
    fprintf(f, "\nset ylabel ");
    plot_str(f, ylabel);
    fprintf(f, "\nset style fill solid 0.85 border -1\nset boxwidth 0.7\n"
               "set xtics rotate by -35 left nomirror\nset grid ytics\nset yrange [0:*]\n"
               "set key top right\nset rmargin 12\nset bmargin 9\n");
    for (unsigned g = 0; g < 3; g++) {
        fprintf(f, "c%u = '%s'\n", g, colors[g]);
    }
    fprintf(f,
            "plot '%s.dat' using 0:($3 == 0 ? $2 : 1/0):xtic(1) with boxes lc rgb c0 "
            "title 'ckstore', \\\n"
            "     '' using 0:($3 == 1 ? $2 : 1/0) with boxes lc rgb c1 title 'limit of "
            "this machine', \\\n"
            "     '' using 0:($3 == 2 ? $2 : 1/0) with boxes lc rgb c2 title 'peer', \\\n"
            "     '' using 0:2:(sprintf('%%.2f', $2)) with labels offset 0,0.7 notitle\n",
            name);
    fclose(f);
    return plot_run(dir, name, timeout_s);
}

int bench_plot_lines(const char *dir, const char *name, const char *title,
                     const char *xlabel, const char *ylabel, int logscale_x,
                     const bench_series_t *s, unsigned n, double timeout_s)
{
    FILE *f;
    if (n == 0) {
        return 0;
    }
    if ((f = plot_open(dir, name, "dat")) == NULL) {
        return -1;
    }
    /* one block per series, separated by two blank lines (gnuplot's index) */
    for (unsigned i = 0; i < n; i++) {
        fprintf(f, "# %s: x y ymin ymax\n", s[i].title);
        for (unsigned j = 0; j < s[i].n; j++) {
            fprintf(f, "%.6g %.4f %.4f %.4f\n", s[i].x[j], s[i].y[j], s[i].ymin[j],
                    s[i].ymax[j]);
        }
        fprintf(f, "\n\n");
    }
    fclose(f);
    if ((f = plot_open(dir, name, "gp")) == NULL) {
        return -1;
    }
    fprintf(f, "set terminal pngcairo size 900,560 font 'Sans,10'\ncd ");
    plot_str(f, dir);
    fprintf(f, "\nset output '%s.png'\nset title ", name);
    plot_str(f, title);
    fprintf(f, "\nset xlabel ");
    plot_str(f, xlabel);
    fprintf(f, "\nset ylabel ");
    plot_str(f, ylabel);
    fprintf(f, "\nset grid\nset yrange [0:*]\nset key top left\n");
    if (logscale_x) {
        fprintf(f, "set logscale x 2\n");
    }
    /* a tick at every measured point, a margin around them */
    fprintf(f, "set offsets graph 0.05, graph 0.05, 0, 0\nset xtics (");
    for (unsigned j = 0; j < s[0].n; j++) {
        fprintf(f, "%s%.6g", j ? ", " : "", s[0].x[j]);
    }
    fprintf(f, ")\n");
    fprintf(f, "plot ");
    for (unsigned i = 0; i < n; i++) {
        fprintf(f, "%s'%s.dat' index %u using 1:2:3:4 with yerrorlines lw 2 pt 7 title ",
                i ? ", \\\n     " : "", name, i);
        plot_str(f, s[i].title);
    }
    fprintf(f, "\n");
    fclose(f);
    return plot_run(dir, name, timeout_s);
}
