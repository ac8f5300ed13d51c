package schemas

// The generated encoders and decoders of the types marked easyjson:json in
// records.go (see "Codec" in the package doc). Regenerate after changing
// one of those types:
//
//go:generate go tool easyjson -no_std_marshalers -output_filename records_easyjson.go records.go
