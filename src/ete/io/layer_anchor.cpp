// ete/io — layer placeholder so the library has a translation unit.
