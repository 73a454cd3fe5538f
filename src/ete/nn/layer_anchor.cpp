// ete/nn — layer placeholder so the library has a translation unit.
