# repro/plot_style.gp - the look every docs/img plot shares (loaded by repro/plots.sh
# and repro/worker_sweep.sh), so the figures in docs/ stay alike: PNG size, font, grid.
set terminal pngcairo size 900,520 font "sans,11"
set grid ytics
