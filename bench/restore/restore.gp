# restore.gp - draws restore.sh's figures: per snapshot (a data block each,
# at most two), crest's median GB/s and the ceiling's per target and cache
# state, min-max as error bars, the medians over the bars and the ratio
# (median of the runs' crest/ceiling) above each pair.
# gnuplot -e "dat='F'; out='F.png'; nb=N; titles='T'" restore.gp
# T: the stamp (machine, commit, date, load), then a title per data block.
set terminal pngcairo size 1200,(nb > 1 ? 1100 : 600) font 'sans,11'
set output out
stamp = system("sed -n 1p '".titles."'")
t1 = system("sed -n 2p '".titles."'")
t2 = system("sed -n 3p '".titles."'")
set multiplot layout nb,1 title "crest bench restore --repeat 3 (threads: one per core): crest against the ceiling of the same run\n{/*0.85 ".stamp."}\n"
set style data histogram
set style histogram errorbars gap 2 lw 1.5
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set yrange [0.1:*]
set ytics (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
set ylabel 'GB/s of logical bytes (log scale)'
set grid ytics
set key outside top center horizontal
set bmargin 4
set xtics nomirror
set lmargin 10
do for [b = 0:nb - 1] {
	set title (b == 0 ? t1 : t2)
	if (b > 0) { unset key }
	plot dat index b using 2:3:4:xtic(1) lc rgb '#d62728' title 'crest (median; bar: min-max)', \
	     '' index b using 5:6:7 lc rgb '#9e9e9e' title 'ceiling: plain parallel read of the same pack bytes', \
	     '' index b using ($0 - 0.125):($4 * 1.2):(sprintf('%.2f', $2)) with labels font 'sans,9' notitle, \
	     '' index b using ($0 + 0.125):($7 * 1.2):(sprintf('%.1f', $5)) with labels font 'sans,9' notitle, \
	     '' index b using 0:(($7 > $4 ? $7 : $4) * 2.2):(sprintf('crest/ceiling %.3f', $8)) with labels font 'sans,10' notitle
}
unset multiplot
